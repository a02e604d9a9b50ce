package cds

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Clients tells which Gateways a client of the service is a dataplane pod
// of, by the client's source address: the pod IP (status.podIPs) of a
// running pod the operator rendered for the Gateway (tern-operator's is
// controller.DataplanePods, which also says how it treats hostNetwork
// pods). Handler serves a client that is not throughAPI only the configs
// of those Gateways.
type Clients interface {
	// Gateways returns the Gateways ("namespace/name") whose running
	// dataplane pods have the address ip, none when no such pod has it. An
	// error (the pod cache not synced yet) refuses the request.
	Gateways(ctx context.Context, ip netip.Addr) ([]string, error)
}

// metricRefused counts the requests Handler refused because the client is
// no dataplane pod of the Gateway asked for, by request: "get" and "watch"
// (answered 403), "list" (answered with the configs of the client's own
// Gateways, counted when it left any out).
var metricRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "tern_config_discovery_refused_total",
	Help: "Config discovery requests refused because the client's address is no running dataplane pod of the Gateway asked for, by request (get, list, watch).",
}, []string{"request"})

// RegisterMetrics registers the service's metrics (tern_config_discovery_*)
// in reg: tern-operator's is controller-runtime's registry, served on its
// metrics address. Registering in the same registry again is no error.
func RegisterMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(metricRefused); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
	}
	return nil
}

// clientAddr is the source address of r, IPv4-mapped IPv6 addresses
// unmapped; invalid when RemoteAddr is no address (never from a TCP
// listener).
func clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// A RemoteAddr without a port (tests' or a proxy's).
		host, _, serr := net.SplitHostPort(r.RemoteAddr)
		if serr != nil {
			host = r.RemoteAddr
		}
		a, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if err != nil {
			return netip.Addr{}
		}
		return a.Unmap()
	}
	return ap.Addr().Unmap()
}

// access is what a client may see: everything (all), or the Gateways of
// gateways ("namespace/name").
type access struct {
	all      bool
	gateways map[string]bool
}

func (a access) allows(id string) bool { return a.all || a.gateways[id] }

// access finds what the client of r may see; see Handler.
func (h *Handler) access(r *http.Request) (access, error) {
	if h.clients == nil || throughAPI(r) {
		return access{all: true}, nil
	}
	a := access{gateways: map[string]bool{}}
	ip := clientAddr(r)
	if !ip.IsValid() {
		return a, nil
	}
	ids, err := h.clients.Gateways(r.Context(), ip)
	if err != nil {
		return a, err
	}
	for _, id := range ids {
		a.gateways[id] = true
	}
	return a, nil
}
