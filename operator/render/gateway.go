package render

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/placeholder"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

func gatewayRef(gw *gwapiv1.Gateway) ObjectRef {
	return ObjectRef{Group: gwapiv1.GroupName, Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}
}

// renderGateway renders one Gateway of a managed class.
func (r *renderer) renderGateway(gw *gwapiv1.Gateway, cs *classState) GatewayResult {
	ref := gatewayRef(gw)
	res := GatewayResult{Namespace: gw.Namespace, Name: gw.Name}

	var fatal []Problem // what keeps the Gateway from being rendered at all
	gc := r.gatewayConfigFor(gw, cs, &fatal)
	var auth config.Auth
	stunOnly := false // STUN mode: no credentials, so nothing to mount
	logLevel := "all:INFO"
	var dp *stnrv1.Dataplane
	var dpProblem []Problem
	if gc != nil {
		var ps []Problem
		var ok bool
		if gc.Spec.STUNMode {
			// STUN mode authenticates nothing: STUNner makes credentials
			// optional there, and ignores them when given.
			auth = config.Auth{Type: config.AuthStatic, Realm: realmOf(gc)}
			stunOnly = true
			if hasCredentials(gc) {
				r.problems.warnf(gatewayConfigRef(gc), "spec.stunMode", "credentials are ignored in STUN mode")
			}
		} else if auth, ps, ok = r.resolveAuth(gc); !ok {
			fatal = append(fatal, ps...)
		}
		if gc.Spec.LogLevel != nil && *gc.Spec.LogLevel != "" {
			if l, ok := r.logLevel(gc, *gc.Spec.LogLevel); ok {
				logLevel = l
			} else {
				fatal = append(fatal, r.problems.errorf(gatewayConfigRef(gc), "spec.logLevel", "%s", l))
			}
		}
		if ps := r.checkRelayPorts(gc); len(ps) > 0 {
			fatal = append(fatal, ps...)
		}
		dpName := DefaultDataplaneName
		if gc.Spec.Dataplane != nil && *gc.Spec.Dataplane != "" {
			dpName = *gc.Spec.Dataplane
		}
		if dp = r.dataplanes[dpName]; dp == nil {
			dpProblem = append(dpProblem, r.problems.errorf(gatewayConfigRef(gc), "spec.dataplane",
				"Dataplane %q not found: the dataplane Deployment cannot be rendered", dpName))
		}
		dp = r.v1alpha1Dataplane(gc, dp)
	}

	listeners := r.checkListeners(gw)
	gatewayOK := gc != nil && len(fatal) == 0
	r.attachRoutes(gw, listeners, gatewayOK)

	svcAnn := serviceAnnotations(gw, gc)
	svcType, mixed := r.serviceSettings(gw, svcAnn)
	r.listenerPortAnnotations(gw, listeners, svcAnn, svcType)
	addrs := r.gatewayAddresses(gw, svcType)
	public := publicIP(addrs)

	usable := 0
	for _, ls := range listeners {
		if ls.usable() {
			usable++
		}
	}
	if gatewayOK && usable == 0 {
		fatal = append(fatal, r.problems.errorf(ref, "spec.listeners", "no usable listener"))
	}

	if gc != nil && len(fatal) == 0 {
		// Credentials go to a Secret, the ConfigMap names its file; a
		// standalone ternd renders in its own memory and keeps them inline.
		var creds *corev1.Secret
		if !r.opts.Standalone && !stunOnly {
			auth, creds = credentialsSecret(gw, auth, r.opts.CredentialsDir)
		}
		cfg := r.buildConfig(gw, gc, auth, logLevel, dp, listeners, public, svcType)
		var data []byte
		var err error
		if r.opts.Memo != nil {
			data, err = r.opts.Memo.marshalChecked(cfg)
		} else {
			data, err = marshalChecked(cfg)
		}
		if err != nil {
			var fe *config.FieldError
			for _, e := range unjoin(err) {
				if errors.As(e, &fe) {
					fatal = append(fatal, r.problems.errorf(ref, "", "dataplane config: %s: %s", fe.Field, fe.Msg))
				} else {
					fatal = append(fatal, r.problems.errorf(ref, "", "dataplane config: %v", e))
				}
			}
		} else {
			res.Config = cfg
			res.TLSSecrets = tlsSecrets(listeners)
			res.ConfigMap = r.configMap(gw, data)
			res.Secret = creds
			res.Service = r.service(gw, svcAnn, listeners, svcType, mixed)
			// Under disable-managed-dataplane the ServiceAccount and its
			// Role are still rendered: the user's own pods can run as it
			// and watch the ConfigMap like ours.
			res.UnmanagedDataplane = annotationTrue(gw.Annotations, AnnotationDisableManagedDataplane)
			if dp != nil || res.UnmanagedDataplane {
				readsConfigMap := res.UnmanagedDataplane || !r.configFromCDS(dp)
				res.ServiceAccount, res.Role, res.RoleBinding = dataplaneAccess(gw, res.ConfigMap.Name, readsConfigMap)
			}
			if dp != nil && !res.UnmanagedDataplane {
				res.Deployment, res.DaemonSet = r.dataplane(gw, dp, listeners, res.TLSSecrets, res.Secret)
				if policy, _ := r.ipFamilyPolicy(gw, svcAnn); dualStack(policy) {
					switch {
					case res.Deployment != nil:
						withPodIPs(&res.Deployment.Spec.Template.Spec)
					case res.DaemonSet != nil:
						withPodIPs(&res.DaemonSet.Spec.Template.Spec)
					}
				}
			}
		}
	}

	res.Status = r.gatewayStatus(gw, &res, listeners, fatal, dpProblem, addrs, usable)
	if mode := offloadEngine(dp); mode != offloadmode.None && res.Config != nil {
		res.Status.Conditions = append(res.Status.Conditions, offloadCondition(mode, gw.Generation))
	}
	return res
}

// attachRoutes decides, for every parentRef naming gw, which listeners the
// route attaches to, and records the route's parent status. A parentRef's
// sectionName and port narrow the listeners; each listener's allowedRoutes
// (namespaces and kinds) must admit the route.
func (r *renderer) attachRoutes(gw *gwapiv1.Gateway, listeners []*listenerState, gatewayOK bool) {
	for _, rt := range r.routes {
		for pi := range rt.parentRefs {
			p := &rt.parentRefs[pi]
			if !parentMatches(rt, p, gw) {
				continue
			}
			st := &gwapiv1.RouteParentStatus{ParentRef: *p, ControllerName: gwapiv1.GatewayController(r.opts.ControllerName)}
			if rt.parents == nil {
				rt.parents = map[int]*gwapiv1.RouteParentStatus{}
			}
			rt.parents[pi] = st
			r.resolve(rt)
			st.Conditions = append(st.Conditions, r.attach(rt, p, gw, listeners, gatewayOK), r.resolvedRefs(rt))
		}
	}
}

// attach attaches rt through parentRef p to the matching listeners of gw
// and returns the route's Accepted condition for that parent.
func (r *renderer) attach(rt *route, p *gwapiv1.ParentReference, gw *gwapiv1.Gateway, listeners []*listenerState, gatewayOK bool) metav1.Condition {
	accepted := func(ok bool, reason, format string, args ...any) metav1.Condition {
		return condition(string(gwapiv1.RouteConditionAccepted), ok, reason, fmt.Sprintf(format, args...), rt.generation)
	}
	if !gatewayOK {
		return accepted(false, string(gwapiv1.RouteReasonPending), "Gateway %s/%s is not accepted", gw.Namespace, gw.Name)
	}
	matched, attached := 0, 0
	var why []string
	for _, ls := range listeners {
		if p.SectionName != nil && *p.SectionName != ls.l.Name {
			continue
		}
		if p.Port != nil && *p.Port != ls.l.Port {
			continue
		}
		matched++
		if !ls.usable() {
			why = append(why, fmt.Sprintf("listener %s is not usable", ls.l.Name))
			continue
		}
		if !kindAllowed(ls.kinds, rt.group) {
			why = append(why, fmt.Sprintf("listener %s does not allow %s routes", ls.l.Name, rt.group))
			continue
		}
		ok, err := r.allowsNamespace(gw, ls.l, rt.namespace)
		if err != nil {
			why = append(why, fmt.Sprintf("listener %s: allowedRoutes.namespaces: %v", ls.l.Name, err))
			continue
		}
		if !ok {
			why = append(why, fmt.Sprintf("listener %s does not allow routes from namespace %s", ls.l.Name, rt.namespace))
			continue
		}
		attached++
		ls.attached[rt.group+"/"+nsName(rt.namespace, rt.name)] = true
		for _, c := range rt.clusters {
			ls.clusters[c.name] = true
		}
	}
	switch {
	case matched == 0:
		return accepted(false, string(gwapiv1.RouteReasonNoMatchingParent), "no listener of Gateway %s/%s matches the parentRef's sectionName and port", gw.Namespace, gw.Name)
	case attached == 0:
		return accepted(false, string(gwapiv1.RouteReasonNotAllowedByListeners), "%s", joinStrings(why))
	}
	return accepted(true, string(gwapiv1.RouteReasonAccepted), "attached to %d listener(s) of Gateway %s/%s", attached, gw.Namespace, gw.Name)
}

// resolvedRefs returns a route's ResolvedRefs condition.
func (r *renderer) resolvedRefs(rt *route) metav1.Condition {
	typ := string(gwapiv1.RouteConditionResolvedRefs)
	if rt.refReason == "" {
		return condition(typ, true, string(gwapiv1.RouteReasonResolvedRefs), "all backends resolved", rt.generation)
	}
	return condition(typ, false, rt.refReason, joinMessages(errorsOnly(rt.refProbs)), rt.generation)
}

func kindAllowed(kinds []gwapiv1.RouteGroupKind, group string) bool {
	for _, k := range kinds {
		if string(deref(k.Group)) == group && k.Kind == "UDPRoute" {
			return true
		}
	}
	return false
}

// buildConfig assembles the dataplane config of gw from its usable
// listeners and the clusters of the routes attached to them.
func (r *renderer) buildConfig(gw *gwapiv1.Gateway, gc *stnrv1.GatewayConfig, auth config.Auth, logLevel string, dp *stnrv1.Dataplane, listeners []*listenerState, public string, svcType corev1.ServiceType) *config.Config {
	// In a pod, the health and metrics endpoints bind the pod's address
	// only: the kubelet's probes and the PodMonitor's scrapes reach the
	// pod IP (under hostNetwork, the node's), and nothing else in the
	// pod's network namespace, nor another of the node's interfaces,
	// needs them. ternd -f (Standalone) binds every interface.
	adminHost := placeholder.PodIP
	if r.opts.Standalone {
		adminHost = "0.0.0.0"
	}
	cfg := &config.Config{
		Version: config.Version,
		Admin: config.Admin{
			Name:          nsName(gw.Namespace, gw.Name),
			LogLevel:      logLevel,
			HealthAddress: fmt.Sprintf("%s:%d", adminHost, HealthPort),
		},
		Auth: auth,
	}
	if dp != nil && dp.Spec.DisableHealthCheck {
		cfg.Admin.HealthAddress = ""
	}
	if dp != nil && dp.Spec.EnableMetricsEndpoint {
		cfg.Admin.MetricsAddress = fmt.Sprintf("%s:%d", adminHost, MetricsPort)
	}
	clusters := map[string]clusterSpec{}
	for _, rt := range r.routes {
		for _, c := range rt.clusters {
			clusters[c.name] = c
		}
	}
	used := map[string]bool{}
	upstreams := r.tlsUpstreams(gw, listeners)
	for _, ls := range listeners {
		if !ls.usable() {
			continue
		}
		l := config.Listener{
			Name:     nsName(gw.Namespace, gw.Name) + "/" + string(ls.l.Name),
			Protocol: ls.protocol,
			Address:  config.DefaultListenAddress,
			Port:     ls.port(),
			Routes:   sortedKeys(ls.clusters),
		}
		if public != "" {
			l.PublicAddress, l.PublicPort = public, r.publicPort(gw, ls, svcType)
		}
		if ls.tlsSecret != "" {
			l.Cert, l.Key = tlsFiles(r.opts.TLSDir, ls.tlsSecret)
		}
		l.Upstream = upstreams[string(ls.l.Name)]
		for _, c := range l.Routes {
			used[c] = true
		}
		cfg.Listeners = append(cfg.Listeners, l)
	}
	for _, name := range sortedKeys(used) {
		c := clusters[name]
		cl := config.Cluster{Name: c.name, Endpoints: c.endpoints, MinPort: c.minPort, MaxPort: c.maxPort}
		if c.strictDNS {
			cl.Type = config.ClusterStrictDNS
		}
		cfg.Clusters = append(cfg.Clusters, cl)
	}
	if !r.opts.Standalone {
		// Bound to the pod's address, which is what peers reach and what
		// XOR-RELAYED-ADDRESS must carry; under hostNetwork that is the
		// node's address.
		cfg.Relay.Address = placeholder.PodIP
		if dp != nil && dp.Spec.HostNetwork {
			// Clients are given the node's ExternalIP where it has one.
			cfg.Relay.Address = placeholder.NodeIP
			cfg.Relay.NodePublicAddresses = r.nodePublicAddresses()
			// Each replica is reached at its node's address, so a redirect
			// can name one. Behind a shared Service address it could not.
			cfg.Alternates = r.replicaAlternates(gw)
			cfg.Limits.AllocationImbalancePercent = r.allocationImbalance(gw)
		}
	}
	if policy, _ := r.ipFamilyPolicy(gw, serviceAnnotations(gw, gc)); dualStack(policy) {
		dualStackRelay(&cfg.Relay, gw, r.opts.Standalone, dp != nil && dp.Spec.HostNetwork)
	}
	if gc.Spec.MinPort != nil {
		cfg.Relay.MinPort = int(*gc.Spec.MinPort)
	}
	if gc.Spec.MaxPort != nil {
		cfg.Relay.MaxPort = int(*gc.Spec.MaxPort)
	}
	if q := gc.Spec.UserQuota; q != nil {
		// STUNner's meaning once set: 0 (or less) is no cap. Unset, the
		// config's default stands.
		cfg.Limits.AllocationsPerUser = config.NoLimit
		if *q > 0 {
			cfg.Limits.AllocationsPerUser = int(*q)
		}
	}
	cfg.STUNMode = gc.Spec.STUNMode
	// Always said, since ternd's own default is Auto: a pod without the
	// privileges offload needs runs None rather than trying and logging.
	// Any engine the Dataplane asks for is rendered as Auto: under XDP or
	// TC a pod whose kernel or runtime refuses BPF exits and crash-loops,
	// under Auto it relays through sockets and says why
	// (docs/offload-control.md).
	cfg.Offload = config.Offload{Engine: offloadmode.None}
	if mode := offloadEngine(dp); mode != offloadmode.None {
		cfg.Offload = config.Offload{Engine: offloadmode.Auto, Interfaces: slices.Clone(dp.Spec.OffloadInterfaces)}
	}
	cfg.SetDefaults()
	return cfg
}

// checkRelayPorts checks the GatewayConfig's relay port range, either end
// of which may be left to its default.
func (r *renderer) checkRelayPorts(gc *stnrv1.GatewayConfig) []Problem {
	lo, hi := config.DefaultRelayMinPort, config.DefaultRelayMaxPort
	if gc.Spec.MinPort != nil {
		lo = int(*gc.Spec.MinPort)
	}
	if gc.Spec.MaxPort != nil {
		hi = int(*gc.Spec.MaxPort)
	}
	if lo > hi {
		return []Problem{r.problems.errorf(gatewayConfigRef(gc), "spec.minPort",
			"relay port range %d-%d is empty (unset ends default to %d-%d)", lo, hi, config.DefaultRelayMinPort, config.DefaultRelayMaxPort)}
	}
	return nil
}

// checkRendered parses data, a marshalled config, exactly as ternd will
// (config.Parse), with a documentation address standing in for the pod's
// and node's IPs, so that a config the dataplane would refuse is reported
// as a problem rather than shipped.
func checkRendered(data []byte) error {
	_, err := config.Parse(data, func(string) string { return "192.0.2.1" })
	return err
}

// checkRenderedJSON is checkRendered for js, the JSON a config's YAML is converted from:
// config.ParseJSON decodes it without the YAML step.
func checkRenderedJSON(js []byte) error {
	_, err := config.ParseJSON(js, func(string) string { return "192.0.2.1" })
	return err
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func tlsSecrets(listeners []*listenerState) []string {
	set := map[string]bool{}
	for _, ls := range listeners {
		if ls.usable() && ls.tlsSecret != "" {
			set[ls.tlsSecret] = true
		}
	}
	return sortedKeys(set)
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func errorsOnly(ps []Problem) []Problem {
	var out []Problem
	for _, p := range ps {
		if p.Severity == SeverityError {
			out = append(out, p)
		}
	}
	return out
}

func joinStrings(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	return out
}
