package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/secretfile"
)

// checkCredentialsMounted fails unless the credential file the config of g
// names is a key of g's Secret, mounted by its Deployment where the
// config looks.
func checkCredentialsMounted(t *testing.T, g *GatewayResult) {
	t.Helper()
	files := secretfile.Files(g.Config.Auth)
	if len(files) == 0 {
		return
	}
	if g.Secret == nil {
		t.Errorf("Gateway %s/%s: the config names %v but no Secret is rendered", g.Namespace, g.Name, files)
		return
	}
	for _, f := range files {
		if filepath.Dir(f) != CredentialsDir {
			t.Errorf("Gateway %s/%s: credential file %s is not in %s", g.Namespace, g.Name, f, CredentialsDir)
		}
		if len(g.Secret.Data[filepath.Base(f)]) == 0 {
			t.Errorf("Gateway %s/%s: Secret %s has no key %s for %s", g.Namespace, g.Name, g.Secret.Name, filepath.Base(f), f)
		}
	}
	pod := g.PodTemplate().Spec
	mounted := false
	for _, v := range pod.Volumes {
		if v.Secret == nil || v.Secret.SecretName != g.Secret.Name {
			continue
		}
		for _, m := range pod.Containers[0].VolumeMounts {
			mounted = mounted || (m.Name == v.Name && m.MountPath == CredentialsDir && m.ReadOnly)
		}
	}
	if !mounted {
		t.Errorf("Gateway %s/%s: Secret %s is not mounted read-only at %s", g.Namespace, g.Name, g.Secret.Name, CredentialsDir)
	}
}

// TestNoCredentialsInConfigMaps reads every golden file (what the tests
// pin, and what reviewers read) and fails if a ConfigMap holds a
// credential: an auth.password or auth.sharedSecret in its config, or any
// value equal to a password or secret of the input (a GatewayConfig's
// inline ones, every Secret value but usernames, auth types and TLS
// files). Credentials belong in the rendered Secret.
func TestNoCredentialsInConfigMaps(t *testing.T) {
	outs, err := filepath.Glob("testdata/*.out.yaml")
	if err != nil || len(outs) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	configMaps, secrets := 0, 0
	for _, out := range outs {
		in := strings.TrimSuffix(out, ".out.yaml") + ".in.yaml"
		creds := inputCredentials(t, in)
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var golden goldenOutput
		if err := yaml.Unmarshal(data, &golden); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		for _, g := range golden.Result.Gateways {
			if g.Secret != nil {
				secrets++
			}
			if g.ConfigMap == nil {
				continue
			}
			configMaps++
			where := out + ": ConfigMap " + g.ConfigMap.Namespace + "/" + g.ConfigMap.Name
			doc := g.ConfigMap.Data[ConfigKey]
			cfg, err := config.Parse([]byte(doc), func(string) string { return "192.0.2.1" })
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if cfg.Auth.Password != "" || cfg.Auth.SharedSecret != "" {
				t.Errorf("%s: the config holds a credential inline (auth %+v)", where, cfg.Auth)
			}
			for _, cm := range []map[string]string{g.ConfigMap.Data, g.ConfigMap.Annotations, g.ConfigMap.Labels} {
				for k, v := range cm {
					var tree any
					if err := yaml.Unmarshal([]byte(v), &tree); err != nil {
						tree = v
					}
					walkStrings(tree, func(s string) {
						if creds[s] {
							t.Errorf("%s: key %s holds the credential %q", where, k, s)
						}
					})
				}
			}
			if g.Config != nil && (g.Config.Auth.Password != "" || g.Config.Auth.SharedSecret != "") {
				t.Errorf("%s: Result.Config holds a credential inline", where)
			}
		}
	}
	if configMaps == 0 || secrets == 0 {
		t.Fatalf("checked %d ConfigMaps and %d credential Secrets: the goldens cover neither", configMaps, secrets)
	}
	t.Logf("%d golden files, %d ConfigMaps, %d credential Secrets", len(outs), configMaps, secrets)
}

// inputCredentials returns every password and secret the input file holds.
func inputCredentials(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, _, err := Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	creds := map[string]bool{}
	notSecret := map[string]bool{"type": true, "username": true, "userName": true,
		corev1.TLSCertKey: true, corev1.TLSPrivateKeyKey: true, "ca.crt": true}
	for _, s := range in.Secrets {
		for k, v := range s.Data {
			if !notSecret[k] && len(v) > 0 {
				creds[string(v)] = true
			}
		}
		for k, v := range s.StringData {
			if !notSecret[k] && v != "" {
				creds[v] = true
			}
		}
	}
	for _, gc := range in.GatewayConfigs {
		if p := gc.Spec.Password; p != nil && p.Value != "" {
			creds[p.Value] = true
		}
		if s := gc.Spec.SharedSecret; s != nil && *s != "" {
			creds[*s] = true
		}
	}
	return creds
}

// walkStrings calls f with every string in a decoded YAML tree, keys too.
func walkStrings(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case map[string]any:
		for k, e := range v {
			f(k)
			walkStrings(e, f)
		}
	case []any:
		for _, e := range v {
			walkStrings(e, f)
		}
	}
}
