package render

import (
	"net/url"
	"strconv"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// STUNner's v1alpha1 API said some things in fields v1 dropped: the
// GatewayConfig's metricsEndpoint and healthCheckEndpoint (URLs the
// dataplane serves on) and the Dataplane's healthCheckPort. v1 says the
// same with the Dataplane's enableMetricsEndpoint and disableHealthCheck,
// on the fixed ports MetricsPort and HealthPort. Tern accepts the v1alpha1
// fields in both versions and renders them with their v1 meaning, here.

// v1alpha1Dataplane returns the Dataplane dp as a Gateway under gc gets it:
// dp itself when gc has no v1alpha1 endpoint field, else a copy with
// gc.spec.metricsEndpoint turning enableMetricsEndpoint on (a non-empty
// URL) and gc.spec.healthCheckEndpoint turning health checking off (an
// empty string) or leaving it on (a URL). A URL naming another port than
// v1's gets a warning on gc: Tern serves on v1's port, which the pod's
// container ports and probes name. An unparsable URL gets a warning and
// changes nothing. dp may be nil (no Dataplane found); so is the
// result then.
func (r *renderer) v1alpha1Dataplane(gc *stnrv1.GatewayConfig, dp *stnrv1.Dataplane) *stnrv1.Dataplane {
	if dp == nil || (gc.Spec.MetricsEndpoint == nil && gc.Spec.HealthCheckEndpoint == nil) {
		return dp
	}
	ref := gatewayConfigRef(gc)
	out := dp.DeepCopy()
	if m := gc.Spec.MetricsEndpoint; m != nil && *m != "" {
		if r.v1alpha1Endpoint(gc, "spec.metricsEndpoint", *m, MetricsPort) {
			out.Spec.EnableMetricsEndpoint = true
		}
	}
	if h := gc.Spec.HealthCheckEndpoint; h != nil {
		switch {
		case *h == "":
			out.Spec.DisableHealthCheck = true
		case r.v1alpha1Endpoint(gc, "spec.healthCheckEndpoint", *h, HealthPort):
			if dp.Spec.DisableHealthCheck {
				r.problems.warnf(ref, "spec.healthCheckEndpoint", "ignored: Dataplane %s disables health checking", dp.Name)
			}
		}
	}
	return out
}

// v1alpha1Endpoint checks a v1alpha1 endpoint URL, http://address:port/path
// (STUNner's form; the scheme is mandatory), and reports whether it can be
// honoured. A port other than port is served on port, with a warning.
func (r *renderer) v1alpha1Endpoint(gc *stnrv1.GatewayConfig, field, s string, port int) bool {
	ref := gatewayConfigRef(gc)
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		r.problems.warnf(ref, field, "%q is not an http://address:port URL: ignored", s)
		return false
	}
	if p := u.Port(); p != "" && p != strconv.Itoa(port) {
		r.problems.warnf(ref, field, "port %s is served on %d, the port STUNner's v1 API uses", p, port)
	}
	return true
}

// checkV1alpha1Dataplanes warns about a Dataplane's v1alpha1
// healthCheckPort naming another port than HealthPort, which is where
// Tern, like STUNner's v1, serves health checks.
func (r *renderer) checkV1alpha1Dataplanes() {
	for _, dp := range r.dataplanes {
		if p := dp.Spec.HealthCheckPort; p != nil && int(*p) != HealthPort {
			r.problems.warnf(dataplaneRef(dp), "spec.healthCheckPort", "port %d is served on %d, the port STUNner's v1 API uses", *p, HealthPort)
		}
	}
}
