package render

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// configFromCDS reports whether the pods of dp take their config from the
// config discovery service: its configSource says CDS, or says nothing
// while the operator serves one (CDS is the default; ConfigMap is the
// opt-in).
func (r *renderer) configFromCDS(dp *stnrv1.Dataplane) bool {
	switch dp.Spec.ConfigSource {
	case ConfigSourceCDS:
		return true
	case ConfigSourceConfigMap:
		return false
	}
	return !r.opts.NoConfigDiscovery
}

// configDiscoveryOrigin is the origin CDS pods watch (ternd -c, and
// STUNNER_CONFIG_ORIGIN): the Service ConfigDiscoveryService in
// Options.ConfigDiscoveryNamespace, by its ClusterIP when the Input has it
// with one (http://<ClusterIP>:<its port>), else by its cluster DNS name
// on Options.ConfigDiscoveryPort
// (http://stunner-config-discovery.<namespace>.svc:<port>).
//
// The ClusterIP first because it needs no cluster DNS: kube-proxy's rules
// for the Service are all a pod needs, on the pod network or on
// hostNetwork, so the dataplane starts in clusters that run no DNS server,
// and while CoreDNS is down. A Service's ClusterIP never changes while it
// exists; recreated, it gets another, the Service event renders again and
// the pods roll over to the new address. The DNS name covers a Service not
// made yet or headless (clusterIP None, whose name resolves to the
// operator's pods: hence the operator's own port).
//
// The Service's port is its port named "cds" (the chart's and deploy/'s),
// else its only port.
func (r *renderer) configDiscoveryOrigin() string {
	ns, port := r.opts.ConfigDiscoveryNamespace, r.opts.ConfigDiscoveryPort
	if svc := r.services[nsName(ns, ConfigDiscoveryService)]; svc != nil {
		ip := svc.Spec.ClusterIP
		if p, ok := configDiscoveryPort(svc); ok && ip != "" && ip != corev1.ClusterIPNone && net.ParseIP(ip) != nil {
			return "http://" + net.JoinHostPort(ip, strconv.Itoa(int(p)))
		}
	}
	return "http://" + ConfigDiscoveryService + "." + ns + ".svc:" + strconv.Itoa(port)
}

// configDiscoveryPort is the port of svc that serves the config discovery
// service: the one named "cds", else the only one.
func configDiscoveryPort(svc *corev1.Service) (int32, bool) {
	for _, p := range svc.Spec.Ports {
		if p.Name == "cds" {
			return p.Port, true
		}
	}
	if len(svc.Spec.Ports) == 1 {
		return svc.Spec.Ports[0].Port, true
	}
	return 0, false
}
