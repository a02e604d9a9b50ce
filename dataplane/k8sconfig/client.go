package k8sconfig

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// configMaps is the part of a ConfigMap client the watch uses.
type configMaps interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// configMapClient lists and watches the ConfigMaps of one namespace the way client-go's typed
// CoreV1().ConfigMaps(namespace) does (k8s.io/client-go/gentype's List and Watch): same REST
// paths, content types, parameter encoding and protobuf preference, on a scheme of its own
// that knows only core/v1.
//
// The typed client is not used because its package imports k8s.io/client-go/kubernetes/scheme,
// which links every built-in API group (~50 packages) and registers them all when the process
// starts, whether or not --configmap is given; gentype links server-side apply, managed fields
// and OpenAPI models besides. Together that was ~10 MB of an idle ternd's resident memory,
// mostly binary pages their init functions touch. The scheme here is built on first use and
// costs only the core/v1 types, which ternd links for -f anyway.
type configMapClient struct {
	client    rest.Interface
	params    runtime.ParameterCodec
	namespace string
}

// List returns the ConfigMaps that opts select.
func (c *configMapClient) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	list := &corev1.ConfigMapList{}
	err := c.client.Get().
		UseProtobufAsDefault().
		Namespace(c.namespace).
		Resource("configmaps").
		VersionedParams(&opts, c.params).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(list)
	return list, err
}

// Watch watches the ConfigMaps that opts select.
func (c *configMapClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.client.Get().
		UseProtobufAsDefault().
		Namespace(c.namespace).
		Resource("configmaps").
		VersionedParams(&opts, c.params).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds != nil {
		return time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	return 0
}

// newConfigMapClient returns a client for the ConfigMaps of namespace.
func newConfigMapClient(rc *rest.Config, namespace string) (*configMapClient, error) {
	scheme := runtime.NewScheme()
	// As k8s.io/client-go/kubernetes/scheme does: meta/v1's options and status kinds in the
	// unversioned "v1", then core/v1 (whose AddToScheme registers meta/v1 there as well).
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("k8sconfig: scheme: %w", err)
	}
	codecs := serializer.NewCodecFactory(scheme)

	// The defaults of the typed core/v1 client (setConfigDefaults in
	// k8s.io/client-go/kubernetes/typed/core/v1).
	config := *rc
	gv := corev1.SchemeGroupVersion
	config.GroupVersion = &gv
	config.APIPath = "/api"
	config.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(&config)
	if err != nil {
		return nil, err
	}
	return &configMapClient{client: client, params: runtime.NewParameterCodec(scheme), namespace: namespace}, nil
}
