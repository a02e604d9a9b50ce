package render

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
)

// Result is what Render produces. Every list is sorted (by namespace and
// name, then kind) so that the same Input always gives the same Result.
type Result struct {
	// GatewayClasses holds the status of each GatewayClass this controller
	// manages.
	GatewayClasses []GatewayClassResult `json:"gatewayClasses,omitempty"`
	// Gateways holds one entry per Gateway of a managed class.
	Gateways []GatewayResult `json:"gateways,omitempty"`
	// Routes holds the status of each route that names a Gateway of a
	// managed class, for those parents only.
	Routes []RouteResult `json:"routes,omitempty"`
	// Problems is every problem found, also those reflected in conditions.
	Problems []Problem `json:"problems,omitempty"`
	// SubstitutedDataplanes maps each Dataplane whose stunnerd image or
	// command was replaced by ternd's to a message saying what was
	// replaced, for the operator's status condition on the Dataplane.
	SubstitutedDataplanes map[string]string `json:"substitutedDataplanes,omitempty"`
}

// GatewayClassResult is the status to write on a managed GatewayClass.
type GatewayClassResult struct {
	Name       string             `json:"name"`
	Conditions []metav1.Condition `json:"conditions"`
	// GatewayConfig is the GatewayConfig the class's parametersRef resolved
	// to, if any.
	GatewayConfig *ObjectRef `json:"gatewayConfig,omitempty"`
}

// GatewayResult is one Gateway's rendering. When the Gateway cannot be
// rendered (its class or GatewayConfig is invalid, no listener is usable,
// the credentials are missing) Config and every object are nil and Status
// says why; a controller should then leave the objects it created earlier
// in place rather than delete them. A missing Dataplane leaves the
// Deployment (or DaemonSet) and its ServiceAccount, Role and RoleBinding nil.
//
// The objects are complete as they are to be applied: named, in the
// Gateway's namespace, labelled LabelManagedBy=LabelManagedByValue and
// controlled by the Gateway through an owner reference.
type GatewayResult struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Config is the dataplane config, as stored in ConfigMap. Address
	// fields may hold placeholder.PodIP or placeholder.NodeIP,
	// and credentials are files of Secret.
	Config    *config.Config    `json:"config,omitempty"`
	ConfigMap *corev1.ConfigMap `json:"configMap,omitempty"`
	// Secret holds the password or shared secret that Config names as a
	// file (auth.passwordFile, auth.sharedSecretFile), mounted by
	// Deployment at CredentialsDir. Nil in standalone mode, where Config
	// holds them inline.
	Secret     *corev1.Secret     `json:"secret,omitempty"`
	Deployment *appsv1.Deployment `json:"deployment,omitempty"`
	// DaemonSet replaces Deployment (which is then nil) when the Dataplane's
	// spec.dataplaneResource is DaemonSet: the same pods, one per node.
	DaemonSet *appsv1.DaemonSet `json:"daemonSet,omitempty"`
	Service   *corev1.Service   `json:"service,omitempty"`
	// ServiceAccount, Role and RoleBinding let the Deployment's pods read
	// ConfigMap through the API, in ConfigMap mode. Pods that take their
	// config from the config discovery service (configSource CDS, the
	// default) read nothing through it: they run as the ServiceAccount with
	// Role and RoleBinding nil.
	ServiceAccount *corev1.ServiceAccount `json:"serviceAccount,omitempty"`
	Role           *rbacv1.Role           `json:"role,omitempty"`
	RoleBinding    *rbacv1.RoleBinding    `json:"roleBinding,omitempty"`
	// TLSSecrets are the Secrets (in the Gateway's namespace) whose tls.crt
	// and tls.key the config's listeners use, each expected under
	// TLSDir/<name>/ (Options.TLSDir when set).
	TLSSecrets []string `json:"tlsSecrets,omitempty"`
	// UnmanagedDataplane: the Gateway is annotated
	// AnnotationDisableManagedDataplane, so Deployment is nil on purpose:
	// the user runs the dataplane (e.g. as a DaemonSet) from ConfigMap.
	UnmanagedDataplane bool `json:"unmanagedDataplane,omitempty"`
	// Status is the Gateway status to write: conditions Accepted and
	// Programmed, per-listener status, and the addresses known so far.
	Status gwapiv1.GatewayStatus `json:"status"`
}

// Object is a Kubernetes object as the controller writes it (the same
// method set as controller-runtime's client.Object).
type Object interface {
	metav1.Object
	runtime.Object
}

// Objects returns every object to create or update for the Gateway, in the
// order to apply them: ServiceAccount, Role, RoleBinding, Secret (the pods
// need them at start), ConfigMap, Service, Deployment or DaemonSet. Nil ones are left
// out.
func (g *GatewayResult) Objects() []Object {
	var out []Object
	if g.ServiceAccount != nil {
		out = append(out, g.ServiceAccount)
	}
	if g.Role != nil {
		out = append(out, g.Role)
	}
	if g.RoleBinding != nil {
		out = append(out, g.RoleBinding)
	}
	if g.Secret != nil {
		out = append(out, g.Secret)
	}
	if g.ConfigMap != nil {
		out = append(out, g.ConfigMap)
	}
	if g.Service != nil {
		out = append(out, g.Service)
	}
	if g.Deployment != nil {
		out = append(out, g.Deployment)
	}
	if g.DaemonSet != nil {
		out = append(out, g.DaemonSet)
	}
	return out
}

// PodTemplate returns the pod template of the dataplane workload, the
// Deployment's or the DaemonSet's, or nil when neither is rendered.
func (g *GatewayResult) PodTemplate() *corev1.PodTemplateSpec {
	switch {
	case g.Deployment != nil:
		return &g.Deployment.Spec.Template
	case g.DaemonSet != nil:
		return &g.DaemonSet.Spec.Template
	}
	return nil
}

// RouteResult is the status to write on one route, a stunner.l7mp.io or a
// gateway.networking.k8s.io UDPRoute (Group tells which).
type RouteResult struct {
	Group     string `json:"group"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Parents has one entry per parentRef naming a managed Gateway, with
	// conditions Accepted and ResolvedRefs.
	Parents []gwapiv1.RouteParentStatus `json:"parents"`
}

// Gateway returns the result for the Gateway namespace/name, or nil.
func (r *Result) Gateway(namespace, name string) *GatewayResult {
	for i := range r.Gateways {
		if r.Gateways[i].Namespace == namespace && r.Gateways[i].Name == name {
			return &r.Gateways[i]
		}
	}
	return nil
}

// Route returns the result for a route of the given group
// (stunner.l7mp.io or gateway.networking.k8s.io), or nil.
func (r *Result) Route(group, namespace, name string) *RouteResult {
	for i := range r.Routes {
		rt := &r.Routes[i]
		if rt.Group == group && rt.Namespace == namespace && rt.Name == name {
			return rt
		}
	}
	return nil
}

// HasErrors reports whether any problem has SeverityError.
func (r *Result) HasErrors() bool {
	for _, p := range r.Problems {
		if p.Severity == SeverityError {
			return true
		}
	}
	return false
}
