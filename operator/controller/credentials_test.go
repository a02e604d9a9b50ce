package controller

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/secretfile"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

// credentialsYAML: the GatewayConfig (in namespace creds) takes static credentials from the
// user's Secret through authRef, as STUNner's reference shows; the Gateways are in another
// namespace, where the user's Secret cannot be mounted. gw-taken's credentials Secret name
// is already a Secret of the user's.
const credentialsYAML = `apiVersion: v1
kind: Namespace
metadata: {name: creds}
---
apiVersion: v1
kind: Namespace
metadata: {name: creds-gw}
---
apiVersion: v1
kind: Secret
metadata: {name: turn-auth, namespace: creds}
stringData: {type: static, username: user-1, password: first-Password-7}
---
apiVersion: v1
kind: Secret
metadata: {name: gw-taken-tern-auth, namespace: creds-gw}
stringData: {note: the user's own}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: creds-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: creds-config, namespace: creds}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: creds-other-class}
spec:
  controllerName: example.com/another-operator
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: creds-config, namespace: creds}
spec:
  dataplane: creds-dataplane
  authRef: {name: turn-auth, namespace: creds}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: creds-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: creds-gw}
spec:
  gatewayClassName: creds-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw-taken, namespace: creds-gw}
spec:
  gatewayClassName: creds-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestCredentialsSecret: a Gateway whose GatewayConfig takes its password from a Secret gets
// a Secret of its own with the password, mounted by its Deployment, and a ConfigMap without
// it. A rotation in the user's Secret reaches the rendered Secret and changes neither the
// ConfigMap nor the pod template (ternd re-reads the mounted file; no rollout). A hand edit
// of the rendered Secret is undone, a Secret of the user's is never overwritten, and the
// rendered Secret is pruned with the Gateway's other objects.
func TestCredentialsSecret(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(credentialsYAML))
	secretName := "gw" + "-tern-auth"

	password := func(want string) func() error {
		return func() error {
			var s corev1.Secret
			if err := get(c, "creds-gw", secretName, &s); err != nil {
				return err
			}
			if got := string(s.Data[render.CredentialsKeyPassword]); got != want {
				return fmt.Errorf("rendered Secret holds password %q, want %q", got, want)
			}
			return nil
		}
	}
	testenv.Eventually(t, waitTimeout, password("first-Password-7"))
	served := func(want string) func() error {
		return func() error {
			public, private, ok := op.cds.Get("creds-gw", "gw")
			if !ok {
				return fmt.Errorf("config discovery serves no config of creds-gw/gw")
			}
			if !bytes.Contains(private, []byte(`"password":"`+want+`"`)) {
				return fmt.Errorf("config discovery's private config of creds-gw/gw lacks password %q: %s", want, private)
			}
			if bytes.Contains(public, []byte(want)) {
				return fmt.Errorf("config discovery's public config of creds-gw/gw holds the password: %s", public)
			}
			return nil
		}
	}
	testenv.Eventually(t, waitTimeout, served("first-Password-7"))

	var cm corev1.ConfigMap
	var dep appsv1.Deployment
	testenv.Eventually(t, waitTimeout, func() error {
		if err := get(c, "creds-gw", "gw", &cm); err != nil {
			return err
		}
		return get(c, "creds-gw", "gw", &dep)
	})
	doc := cm.Data[render.ConfigKey]
	if strings.Contains(doc, "first-Password-7") {
		t.Fatalf("the ConfigMap holds the password:\n%s", doc)
	}
	cfg, err := config.Parse([]byte(doc), func(string) string { return "192.0.2.1" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.Username != "user-1" || cfg.Auth.Password != "" || cfg.Auth.PasswordFile != render.CredentialsDir+"/"+render.CredentialsKeyPassword {
		t.Fatalf("config auth %+v, want user-1 with the password file in %s", cfg.Auth, render.CredentialsDir)
	}
	mounted := false
	pod := dep.Spec.Template.Spec
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secretName {
			for _, m := range pod.Containers[0].VolumeMounts {
				mounted = mounted || (m.Name == v.Name && m.MountPath == render.CredentialsDir && m.ReadOnly)
			}
		}
	}
	if !mounted {
		t.Fatalf("the Deployment does not mount Secret %s at %s: %+v", secretName, render.CredentialsDir, pod.Volumes)
	}

	t.Run("rotation in the user's Secret", func(t *testing.T) {
		var user corev1.Secret
		if err := get(c, "creds", "turn-auth", &user); err != nil {
			t.Fatal(err)
		}
		user.Data["password"] = []byte("second-Password-8")
		if err := c.Update(ctx, &user); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, password("second-Password-8"))
		// The config discovery service's private config (a port-forward's: turncat k8s://)
		// holds the new password though the ConfigMap's document is unchanged; the public one
		// holds none.
		testenv.Eventually(t, waitTimeout, served("second-Password-8"))
		var cm2 corev1.ConfigMap
		var dep2 appsv1.Deployment
		if err := get(c, "creds-gw", "gw", &cm2); err != nil {
			t.Fatal(err)
		}
		if err := get(c, "creds-gw", "gw", &dep2); err != nil {
			t.Fatal(err)
		}
		if cm2.ResourceVersion != cm.ResourceVersion {
			t.Errorf("the ConfigMap changed on a password rotation: %q", cm2.Data[render.ConfigKey])
		}
		if dep2.Generation != dep.Generation {
			t.Errorf("the Deployment changed on a password rotation (generation %d -> %d): its pods would roll", dep.Generation, dep2.Generation)
		}
	})

	t.Run("edited rendered Secret restored", func(t *testing.T) {
		var s corev1.Secret
		if err := get(c, "creds-gw", secretName, &s); err != nil {
			t.Fatal(err)
		}
		s.Data[render.CredentialsKeyPassword] = []byte("hand-edited")
		if err := c.Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, password("second-Password-8"))
	})

	t.Run("a Secret of the user's is not overwritten", func(t *testing.T) {
		// The user's Secret holds the name of gw-taken's credentials Secret: a conflict, so
		// nothing of gw-taken is applied (conflict.go), and Programmed says which object.
		testenv.Eventually(t, waitTimeout, func() error {
			var gw gwapiv1.Gateway
			if err := get(c, "creds-gw", "gw-taken", &gw); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed))
			if cond == nil || cond.Reason != ReasonConflict || !strings.Contains(cond.Message, "Secret creds-gw/gw-taken-tern-auth") {
				return fmt.Errorf("Programmed of gw-taken is %v, want reason %s naming Secret creds-gw/gw-taken-tern-auth", cond, ReasonConflict)
			}
			return nil
		})
		var s corev1.Secret
		if err := get(c, "creds-gw", "gw-taken-tern-auth", &s); err != nil {
			t.Fatal(err)
		}
		if len(s.OwnerReferences) != 0 || len(s.Data) != 1 || !bytes.Equal(s.Data["note"], []byte("the user's own")) {
			t.Fatalf("the user's Secret was changed: owners %v, data %q", s.OwnerReferences, s.Data)
		}
		// ...nor its Deployment, whose pods would mount the user's Secret.
		var dep appsv1.Deployment
		if err := get(c, "creds-gw", "gw-taken", &dep); !apierrors.IsNotFound(err) {
			t.Fatalf("Deployment of gw-taken: got %v, want NotFound while its Secret is the user's", err)
		}
		// The conflict fails every reconcile; other tests share the operator.
		var gw gwapiv1.Gateway
		if err := get(c, "creds-gw", "gw-taken", &gw); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &gw); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pruned with the Gateway's objects", func(t *testing.T) {
		var gw gwapiv1.Gateway
		if err := get(c, "creds-gw", "gw", &gw); err != nil {
			t.Fatal(err)
		}
		gw.Spec.GatewayClassName = "creds-other-class"
		if err := c.Update(ctx, &gw); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var s corev1.Secret
			if err := get(c, "creds-gw", secretName, &s); !apierrors.IsNotFound(err) {
				return fmt.Errorf("rendered Secret: got %v, want NotFound", err)
			}
			return nil
		})
		var user corev1.Secret
		if err := get(c, "creds", "turn-auth", &user); err != nil {
			t.Fatalf("the user's Secret: %v", err)
		}
	})
}

// mountedAuth returns cfg's auth as ternd sees it in the Gateway's pod: with the credential
// files read from the rendered Secret, as kubelet mounts it at render.CredentialsDir. The
// file fields are cleared, so the result compares with inline credentials.
func mountedAuth(c client.Client, ns, gwName string, cfg *config.Config) (config.Auth, error) {
	var s corev1.Secret
	if err := get(c, ns, gwName+"-tern-auth", &s); err != nil {
		return config.Auth{}, err
	}
	a, err := secretfile.Read(cfg.Auth, func(path string) ([]byte, error) {
		key, ok := strings.CutPrefix(path, render.CredentialsDir+"/")
		if !ok || s.Data[key] == nil {
			return nil, fmt.Errorf("%s is not a key of Secret %s/%s", path, ns, s.Name)
		}
		return s.Data[key], nil
	})
	a.PasswordFile, a.SharedSecretFile = "", ""
	return a, err
}
