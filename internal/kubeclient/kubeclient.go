// Package kubeclient sets up Kubernetes API clients the same way for every Tern binary: ternd
// watching its ConfigMap (dataplane/k8sconfig) and tern-operator. It depends on client-go only,
// so the dataplane can use it without pulling in the operator.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig returns the client configuration for the kubeconfig file at path, or when path
// is "" the first of: $KUBECONFIG, ~/.kube/config, the in-cluster service account. It never
// prompts. It returns an error when no configuration is found or the one found is invalid.
func RESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	return c, nil
}
