package render

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// PlaceholderValue is the text that stands in for a credential or a
// certificate that WithPlaceholders could not find in the input.
const PlaceholderValue = "TERN-PLACEHOLDER"

// WithPlaceholders adds to in a placeholder for every Secret and Service
// that its GatewayConfigs, Gateways and routes refer to but that in lacks,
// and returns a note on each. `tern-operator render` uses it: manifests
// (STUNner's reference examples among them) are usually kept apart from
// the Secrets they name, and without the Secret the credentials are
// unknown and nothing would be rendered. A placeholder Secret holds
// PlaceholderValue under the keys the reference needs; a placeholder
// Service is headless, so it adds no peer to any allowlist.
func (in *Input) WithPlaceholders() []string {
	secrets := map[string]*corev1.Secret{}
	for i := range in.Secrets {
		secrets[nsName(in.Secrets[i].Namespace, in.Secrets[i].Name)] = &in.Secrets[i]
	}
	services := map[string]bool{}
	for _, s := range in.Services {
		services[nsName(s.Namespace, s.Name)] = true
	}
	added := map[string]*corev1.Secret{}
	var notes []string
	// needSecret makes sure Secret ns/name exists and, if it is a
	// placeholder, holds keys.
	needSecret := func(ns, name, why string, typ corev1.SecretType, keys ...string) {
		k := nsName(ns, name)
		s := added[k]
		if s == nil {
			if secrets[k] != nil {
				return
			}
			s = &corev1.Secret{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Type:       typ,
				Data:       map[string][]byte{},
			}
			added[k] = s
			notes = append(notes, fmt.Sprintf("placeholder Secret %s (%s): not in the input", k, why))
		}
		for _, key := range keys {
			s.Data[key] = []byte(PlaceholderValue)
		}
	}

	for _, gc := range in.GatewayConfigs {
		spec := &gc.Spec
		if p := spec.Password; p != nil && p.SecretRef != nil {
			ns := gc.Namespace
			if p.SecretRef.Namespace != "" {
				ns = p.SecretRef.Namespace
			}
			key := p.SecretRef.Key
			if key == "" {
				key = "password"
			}
			needSecret(ns, p.SecretRef.Name, "GatewayConfig "+gc.Name+" password", corev1.SecretTypeOpaque, key)
		}
		if a := spec.AuthRef; a != nil && (a.Group == nil || *a.Group == "") && (a.Kind == nil || *a.Kind == "Secret") {
			ns := gc.Namespace
			if a.Namespace != nil && *a.Namespace != "" {
				ns = string(*a.Namespace)
			}
			// Only what the inline fields lack: the Secret's values
			// override them.
			var keys []string
			switch strings.ToLower(deref(spec.AuthType)) {
			case "ephemeral", "longterm", "timewindowed":
				if deref(spec.SharedSecret) == "" && spec.Password == nil {
					keys = append(keys, "secret")
				}
			default:
				if deref(spec.Username) == "" && deref(spec.UserName) == "" {
					keys = append(keys, "username")
				}
				if spec.Password == nil {
					keys = append(keys, "password")
				}
			}
			needSecret(ns, string(a.Name), "GatewayConfig "+gc.Name+" authRef", corev1.SecretTypeOpaque, keys...)
		}
	}
	for _, gw := range in.Gateways {
		for _, l := range gw.Spec.Listeners {
			if l.TLS == nil || len(l.TLS.CertificateRefs) == 0 {
				continue
			}
			c := l.TLS.CertificateRefs[0]
			if (c.Group != nil && *c.Group != "") || (c.Kind != nil && *c.Kind != "Secret") ||
				(c.Namespace != nil && *c.Namespace != "" && string(*c.Namespace) != gw.Namespace) {
				continue // render reports these as they are
			}
			needSecret(gw.Namespace, string(c.Name), "Gateway "+gw.Name+" listener "+string(l.Name)+" certificate",
				corev1.SecretTypeTLS, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		}
	}
	needService := func(ns, name, routeNS, route string) {
		k := nsName(ns, name)
		if services[k] {
			return
		}
		services[k] = true
		in.Services = append(in.Services, corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
		})
		notes = append(notes, fmt.Sprintf("placeholder Service %s (backend of UDPRoute %s/%s): not in the input; no peers", k, routeNS, route))
	}
	isService := func(g *gwapiv1.Group, k *gwapiv1.Kind) bool {
		return (g == nil || *g == "") && (k == nil || *k == "Service")
	}
	for _, rt := range in.UDPRoutes {
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if isService(b.Group, b.Kind) {
					needService(namespaceOr(b.Namespace, rt.Namespace), string(b.Name), rt.Namespace, rt.Name)
				}
			}
		}
	}
	for _, rt := range in.GatewayUDPRoutes {
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if isService(b.Group, b.Kind) {
					needService(namespaceOr(b.Namespace, rt.Namespace), string(b.Name), rt.Namespace, rt.Name)
				}
			}
		}
	}

	keys := make([]string, 0, len(added))
	for k := range added {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		in.Secrets = append(in.Secrets, *added[k])
	}
	sort.Strings(notes)
	return notes
}

func namespaceOr(ns *gwapiv1.Namespace, def string) string {
	if ns != nil && *ns != "" {
		return string(*ns)
	}
	return def
}
