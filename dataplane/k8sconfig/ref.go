package k8sconfig

import (
	"fmt"
	"strings"
)

// ParseRef splits a ConfigMap reference given as "namespace/name" or "name" (for a flag such
// as ternd's --configmap) and returns its namespace and name; a bare name takes
// defaultNamespace (typically $POD_NAMESPACE). An empty part is an error.
func ParseRef(ref, defaultNamespace string) (namespace, name string, err error) {
	namespace, name, found := strings.Cut(ref, "/")
	if !found {
		namespace, name = defaultNamespace, ref
	}
	if namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("configmap reference %q: want namespace/name, or name with a default namespace", ref)
	}
	return namespace, name, nil
}
