package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/operator/render"
)

// gatewayFile renders ternd's config from Gateway API manifests (`ternd -f`),
// as tern-operator would, in standalone mode: no pod address placeholders,
// so the relay address follows the config's defaults, except for a
// dual-stack Gateway, whose relay binds its spec.addresses of each family.
type gatewayFile struct {
	// gateway is "namespace/name" of the Gateway to serve; "" means the
	// first Gateway in the file.
	gateway string
	// tlsDir holds the certificates and keys of TURN-TLS/DTLS listeners,
	// taken from the Secrets in the file: one private directory for the
	// life of the process, rewritten on every load, removed by close.
	tlsDir string
}

// load reads the manifests at path (GatewayClass, GatewayConfig, Gateway,
// routes, and the Services, EndpointSlices, StaticServices and Secrets
// they refer to) and returns the dataplane config of the chosen Gateway.
// Problems that keep that Gateway from rendering are returned as one error
// naming each of them.
func (f *gatewayFile) load(path string) (*config.Config, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	in, _, err := render.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	gw, err := f.pick(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	opts := render.Options{Standalone: true}
	if needsTLS(gw) {
		if f.tlsDir == "" {
			if f.tlsDir, err = os.MkdirTemp("", "ternd-tls-"); err != nil {
				return nil, err
			}
		}
		opts.TLSDir = f.tlsDir
	}
	res := render.Render(in, opts)
	g := res.Gateway(gw.Namespace, gw.Name)
	if g == nil {
		return nil, fmt.Errorf("%s: Gateway %s/%s: its GatewayClass %q is missing or not managed by %s",
			path, gw.Namespace, gw.Name, gw.Spec.GatewayClassName, render.DefaultControllerName)
	}
	if g.Config == nil {
		var errs []error
		for _, p := range res.Problems {
			if p.Severity == render.SeverityError {
				errs = append(errs, p)
			}
		}
		return nil, fmt.Errorf("%s: Gateway %s/%s cannot be rendered: %w", path, gw.Namespace, gw.Name, errors.Join(errs...))
	}
	if err := writeTLSSecrets(in, gw.Namespace, g.TLSSecrets, opts.TLSDir); err != nil {
		return nil, err
	}
	// Serve the document the operator would store in the ConfigMap, parsed as -c and
	// --configmap parse it, so standalone mode cannot drift from the contract.
	cfg, err := config.Parse([]byte(g.ConfigMap.Data[render.ConfigKey]), os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: Gateway %s/%s: %w", path, gw.Namespace, gw.Name, err)
	}
	return cfg, nil
}

// pick returns the Gateway f serves: the one f.gateway names, or the first.
func (f *gatewayFile) pick(in *render.Input) (*gwapiv1.Gateway, error) {
	if len(in.Gateways) == 0 {
		return nil, errors.New("no Gateway")
	}
	if f.gateway == "" {
		return &in.Gateways[0], nil
	}
	for i := range in.Gateways {
		if g := &in.Gateways[i]; g.Namespace+"/"+g.Name == f.gateway {
			return g, nil
		}
	}
	return nil, fmt.Errorf("no Gateway %s", f.gateway)
}

// close removes the certificates and keys load wrote.
func (f *gatewayFile) close() {
	if f.tlsDir != "" {
		_ = os.RemoveAll(f.tlsDir)
	}
}

// needsTLS reports whether a Gateway has a TURN-TLS or TURN-DTLS listener
// (or one of their aliases TLS and DTLS),
// whose certificate files must then be written somewhere.
func needsTLS(gw *gwapiv1.Gateway) bool {
	for _, l := range gw.Spec.Listeners {
		if p, _ := protocol.Normalize(string(l.Protocol)); p.Secure() {
			return true
		}
	}
	return false
}

// writeTLSSecrets writes tls.crt and tls.key of each named Secret to
// dir/<secret>/, readable by the owner only, where the config expects them.
func writeTLSSecrets(in *render.Input, namespace string, names []string, dir string) error {
	for _, name := range names {
		var s *corev1.Secret
		for i := range in.Secrets {
			if in.Secrets[i].Namespace == namespace && in.Secrets[i].Name == name {
				s = &in.Secrets[i]
			}
		}
		if s == nil {
			return fmt.Errorf("TLS Secret %s/%s vanished", namespace, name)
		}
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return err
		}
		for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
			if err := os.WriteFile(filepath.Join(sub, k), s.Data[k], 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}
