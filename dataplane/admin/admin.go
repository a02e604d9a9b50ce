// Package admin serves a dataplane's HTTP endpoints: liveness and readiness
// on the health address (what kubelet probes), with the status that
// `stunnerctl status` reads (Status), Prometheus metrics on the
// metrics address, and, when asked for, Go's profiling endpoints on an
// address of their own. None is authenticated, which is why the examples
// bind them to loopback and the rendered pods to the pod's own address,
// and each address's server holds few connections for a short time
// (Limits), so that reaching the port never takes the file descriptors
// and memory the TURN listeners need.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
)

// Handlers are what the endpoints report.
type Handlers struct {
	// Ready reports whether the dataplane takes new allocations: /ready
	// answers 200 when it does and 503 otherwise.
	Ready func() bool
	// Metrics writes the dataplane's metrics in Prometheus text format,
	// with HELP and TYPE lines; /metrics adds the Go runtime and process
	// metrics (go_*, process_*, with theirs) after them.
	Metrics func(io.Writer)
	// Offload reports the kernel fast path's state, served as JSON at
	// offloadmode.ReportPath on the health address (nil: not served).
	Offload func() offloadmode.Report
	// Status reports the dataplane's state in the shape of stunnerd's
	// /status (see Status), served as JSON at StatusPath on the health
	// address (nil: not served).
	Status func() Status
}

// Endpoints are running HTTP servers of one config.Admin.
type Endpoints struct {
	servers   []*http.Server
	listeners []*limitListener
}

// Start serves /live, /ready, /offload (when h.Offload is set) and
// /status (when h.Status is set) on a.HealthAddress, and on its
// LoopbackTwin when it has one (a port taken there is logged, not an
// error), and /metrics on a.MetricsAddress (the two may be one address;
// an empty one is off),
// each address within DefaultLimits. It returns an error naming the
// address that cannot be listened on, and then serves none.
func Start(a config.Admin, h Handlers, log *slog.Logger) (*Endpoints, error) {
	return StartLimited(a, h, log, DefaultLimits)
}

// StartLimited is Start with each address's server within lim.
func StartLimited(a config.Admin, h Handlers, log *slog.Logger, lim Limits) (*Endpoints, error) {
	e := &Endpoints{}
	mux := map[string]*http.ServeMux{}
	get := func(addr string) *http.ServeMux {
		if mux[addr] == nil {
			mux[addr] = http.NewServeMux()
		}
		return mux[addr]
	}
	if addr := a.HealthAddress; addr != "" {
		m := get(addr)
		m.HandleFunc("/live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		m.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
			if !h.Ready() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		if h.Offload != nil {
			// tern-operator reads it for the Gateway's OffloadActive
			// condition (docs/offload-control.md): the pod needs no API
			// credentials to report it.
			m.HandleFunc(offloadmode.ReportPath, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(h.Offload())
			})
		}
		if h.Status != nil {
			// `stunnerctl status` port-forwards to the pod's health
			// port and decodes this as stunnerd's StunnerStatus.
			m.HandleFunc(StatusPath, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				enc := json.NewEncoder(w)
				enc.SetEscapeHTML(false) // "<SECRET>" reads as itself
				_ = enc.Encode(h.Status())
			})
		}
	}
	if addr := a.MetricsAddress; addr != "" {
		// TYPE lines let Prometheus, vmagent and Mimir tell counters from
		// gauges; the library writes them only when asked.
		metrics.ExposeMetadata(true)
		get(addr).HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			h.Metrics(w)
			metrics.WriteProcessMetrics(w)
			metrics.WriteFDMetrics(w)
		})
	}
	for addr, m := range mux {
		if err := e.serve(addr, m, lim, log); err != nil {
			e.Close()
			return nil, err
		}
	}
	if twin := LoopbackTwin(a.HealthAddress); twin != "" && mux[twin] == nil {
		// kubectl port-forward, and so `stunnerctl status`, connects to
		// localhost inside the pod's network namespace (the node's under
		// hostNetwork), where a health address on the pod's IP is not
		// reachable. Loopback reaches nothing beyond the pod (the node),
		// and a port taken there costs only the port-forward.
		if err := e.serve(twin, mux[a.HealthAddress], lim, log); err != nil {
			log.Warn("health endpoints not served on loopback: kubectl port-forward and stunnerctl status cannot reach them", "address", twin, "error", err)
		}
	}
	return e, nil
}

// LoopbackTwin returns the loopback address of addr's family at addr's
// port ("127.0.0.1:8086" for "10.0.0.5:8086", "[::1]:8086" for an IPv6
// one) when addr's host is an IP that is neither loopback nor unspecified
// (whose sockets loopback connections reach already), and "" otherwise:
// Start serves the health endpoints there too.
func LoopbackTwin(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsLoopback() || ip.IsUnspecified() {
		return ""
	}
	if ip.Unmap().Is4() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return net.JoinHostPort("::1", port)
}

func (e *Endpoints) serve(addr string, h http.Handler, lim Limits, log *slog.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http endpoint %s: %w", addr, err)
	}
	ln := newLimitListener(l, lim)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		// The endpoints take GET requests without bodies: 8 KiB of
		// headers is plenty, and bounds what an idle client makes the
		// server buffer (net/http's default is 1 MiB).
		MaxHeaderBytes: 8 << 10,
	}
	e.servers = append(e.servers, srv)
	e.listeners = append(e.listeners, ln)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http endpoint stopped", "address", addr, "error", err)
		}
	}()
	return nil
}

// StartPprof serves Go's CPU, heap and other runtime profiles under
// /debug/pprof/ on addr (ternd --pprof), on a server of its own so that the
// health and metrics endpoints never expose them, within DefaultLimits but
// with 5 minutes to write a response (a profile takes its seconds
// parameter before it writes). It returns an error when addr cannot be
// listened on.
func StartPprof(addr string, log *slog.Logger) (*Endpoints, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	e := &Endpoints{}
	if err := e.serve(addr, mux, pprofLimits, log); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops the servers, letting requests under way finish for up to 2 s.
// A nil Endpoints is closed already.
func (e *Endpoints) Close() {
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range e.servers {
		_ = srv.Shutdown(ctx)
	}
	// A server whose Serve goroutine has not started yet does not know its
	// listener: close them all here, so the address is free on return.
	for _, ln := range e.listeners {
		_ = ln.Close()
	}
}
