package render

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// DefaultControllerName is the controllerName of GatewayClasses Tern
// manages unless told otherwise: STUNner's, so STUNner manifests work as is.
const DefaultControllerName = "stunner.l7mp.io/gateway-operator"

// Options tune Render. The zero value renders for the operator.
type Options struct {
	// ControllerName selects the GatewayClasses to manage. Default
	// DefaultControllerName.
	ControllerName string
	// Memo, when set, spares a Render the marshalling and checking of
	// every config a Render before it produced too (Memo). The result is
	// the same with or without; the operator keeps one for its renders.
	Memo *Memo
	// Standalone renders for `ternd -f` on a host rather than for a pod:
	// no address placeholders (the relay address is left to the config's
	// defaults) and TLS files under TLSDir as given.
	Standalone bool
	// TLSDir is where the dataplane finds TLS Secrets, one directory per
	// Secret. Default TLSDir.
	TLSDir string
	// CredentialsDir is where the Deployment mounts the credentials Secret
	// and the config names its files. Default CredentialsDir.
	CredentialsDir string
	// LabelFilter are the Gateway label keys not copied to the dataplane
	// Deployment or DaemonSet. Nil means DefaultLabelFilter; empty copies
	// every label (STUNner's STUNNER_GATEWAY_OPERATOR_LABEL_FILTER).
	LabelFilter []string
	// ConfigDiscoveryNamespace is the namespace of the Service
	// ConfigDiscoveryService in front of tern-operator's config discovery
	// service, which the pods of a Dataplane whose configSource is CDS (the
	// default) watch: the operator's own namespace. Default
	// DefaultConfigDiscoveryNamespace. See configDiscoveryOrigin for the
	// origin rendered from it.
	ConfigDiscoveryNamespace string
	// ConfigDiscoveryPort is the TCP port the operator serves the config
	// discovery service on, named in the origin when the Service has no
	// ClusterIP or is not in the Input. Default DefaultConfigDiscoveryPort.
	ConfigDiscoveryPort int
	// NoConfigDiscovery says the operator serves no config discovery
	// service (tern-operator --config-discovery-address=0): a Dataplane
	// without configSource then renders ConfigMap mode, so that its pods
	// get a config at all. A Dataplane that says CDS still gets it.
	NoConfigDiscovery bool
}

func (o Options) withDefaults() Options {
	if o.ConfigDiscoveryNamespace == "" {
		o.ConfigDiscoveryNamespace = DefaultConfigDiscoveryNamespace
	}
	if o.ConfigDiscoveryPort == 0 {
		o.ConfigDiscoveryPort = DefaultConfigDiscoveryPort
	}
	if o.ControllerName == "" {
		o.ControllerName = DefaultControllerName
	}
	if o.TLSDir == "" {
		o.TLSDir = TLSDir
	}
	if o.CredentialsDir == "" {
		o.CredentialsDir = CredentialsDir
	}
	if o.LabelFilter == nil {
		o.LabelFilter = DefaultLabelFilter
	}
	return o
}

// Render computes, from the objects in in, for every Gateway whose
// GatewayClass has the controller name of opts, the dataplane config and
// every object the controller applies for it (ConfigMap, Service,
// Deployment, and the ServiceAccount, Role and RoleBinding of its pods);
// the status of those classes, Gateways and the routes attached to them;
// and the problems found. It neither modifies
// in nor keeps references into it, and returns a deterministic Result.
func Render(in *Input, opts Options) *Result {
	if opts.Memo != nil {
		opts.Memo.rotate()
	}
	r := newRenderer(in, opts.withDefaults())
	res := &Result{}

	classes := map[string]*classState{}
	for i := range in.GatewayClasses {
		gc := &in.GatewayClasses[i]
		if string(gc.Spec.ControllerName) != r.opts.ControllerName {
			continue
		}
		cs := r.resolveClass(gc)
		classes[gc.Name] = cs
		res.GatewayClasses = append(res.GatewayClasses, cs.result())
	}
	sort.Slice(res.GatewayClasses, func(i, j int) bool { return res.GatewayClasses[i].Name < res.GatewayClasses[j].Name })

	gws := make([]*gwapiv1.Gateway, 0, len(in.Gateways))
	for i := range in.Gateways {
		if classes[string(in.Gateways[i].Spec.GatewayClassName)] != nil {
			gws = append(gws, &in.Gateways[i])
		}
	}
	sort.Slice(gws, func(i, j int) bool {
		return nsName(gws[i].Namespace, gws[i].Name) < nsName(gws[j].Namespace, gws[j].Name)
	})
	for _, gw := range gws {
		res.Gateways = append(res.Gateways, r.renderGateway(gw, classes[string(gw.Spec.GatewayClassName)]))
	}

	res.Routes = r.routeResults()
	res.Problems = r.problems.sorted()
	res.SubstitutedDataplanes = r.substituted
	if len(res.SubstitutedDataplanes) == 0 {
		res.SubstitutedDataplanes = nil
	}
	return res
}

// renderer holds the indexed input and what rendering collects on the way.
type renderer struct {
	in   *Input
	opts Options

	gatewayConfigs map[string][]*stnrv1.GatewayConfig // by name, any namespace
	secrets        map[string]*corev1.Secret          // by namespace/name
	services       map[string]*corev1.Service
	slices         map[string][]*discoveryv1.EndpointSlice // by namespace/service name
	staticServices map[string]*stnrv1.StaticService
	dataplanes     map[string]*stnrv1.Dataplane // by name, stunnerd substituted
	substituted    map[string]string            // Dataplane name: what substituteStunnerd replaced
	namespaces     map[string]*corev1.Namespace
	routes         []*route

	problems problems
}

func newRenderer(in *Input, opts Options) *renderer {
	r := &renderer{
		in:             in,
		opts:           opts,
		gatewayConfigs: map[string][]*stnrv1.GatewayConfig{},
		secrets:        map[string]*corev1.Secret{},
		services:       map[string]*corev1.Service{},
		slices:         map[string][]*discoveryv1.EndpointSlice{},
		staticServices: map[string]*stnrv1.StaticService{},
		dataplanes:     map[string]*stnrv1.Dataplane{},
		substituted:    map[string]string{},
		namespaces:     map[string]*corev1.Namespace{},
	}
	for i := range in.GatewayConfigs {
		c := &in.GatewayConfigs[i]
		r.gatewayConfigs[c.Name] = append(r.gatewayConfigs[c.Name], c)
	}
	for i := range in.Secrets {
		s := &in.Secrets[i]
		r.secrets[nsName(s.Namespace, s.Name)] = s
	}
	for i := range in.Services {
		s := &in.Services[i]
		r.services[nsName(s.Namespace, s.Name)] = s
	}
	for i := range in.EndpointSlices {
		s := &in.EndpointSlices[i]
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			k := nsName(s.Namespace, svc)
			r.slices[k] = append(r.slices[k], s)
		}
	}
	for i := range in.StaticServices {
		s := &in.StaticServices[i]
		r.staticServices[nsName(s.Namespace, s.Name)] = s
	}
	for i := range in.Dataplanes {
		dp, msg := substituteStunnerd(&in.Dataplanes[i])
		if msg != "" {
			r.problems.warnf(dataplaneRef(dp), "spec", "%s", msg)
			r.substituted[dp.Name] = msg
		}
		r.dataplanes[dp.Name] = dp
	}
	for i := range in.Namespaces {
		r.namespaces[in.Namespaces[i].Name] = &in.Namespaces[i]
	}
	r.checkV1alpha1Dataplanes()
	r.routes = r.collectRoutes()
	return r
}

func nsName(namespace, name string) string { return namespace + "/" + name }
