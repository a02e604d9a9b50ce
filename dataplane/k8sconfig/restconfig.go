package k8sconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig returns the client configuration for the kubeconfig file at path, or when path
// is "" the first of: $KUBECONFIG, ~/.kube/config, the in-cluster service account. It never
// prompts.
func RESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("k8sconfig: kubernetes client config: %w", err)
	}
	return c, nil
}
