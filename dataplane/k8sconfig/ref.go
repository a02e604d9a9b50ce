package k8sconfig

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseRef splits a ConfigMap reference given as "namespace/name" or "name" (for a flag such
// as ternd's --configmap) and returns its namespace and name; a bare name takes
// defaultNamespace (typically $POD_NAMESPACE). An empty part is an error, and so is a
// namespace that is not a DNS-1123 label or a name that is not a DNS-1123 subdomain, the forms
// the API server gives Namespaces and ConfigMaps: such a reference names nothing, and the
// watch would wait for it forever instead of failing at start.
func ParseRef(ref, defaultNamespace string) (namespace, name string, err error) {
	namespace, name, found := strings.Cut(ref, "/")
	if !found {
		namespace, name = defaultNamespace, ref
	}
	if namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("configmap reference %q: want namespace/name, or name with a default namespace", ref)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", "", fmt.Errorf("configmap reference %q: namespace %q: %s", ref, namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("configmap reference %q: name %q: %s", ref, name, strings.Join(errs, "; "))
	}
	return namespace, name, nil
}
