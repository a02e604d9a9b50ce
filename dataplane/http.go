package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/dataplane/config"
)

// httpEndpoints serve /live and /ready on the health address and /metrics
// on the metrics address (they may be the same).
type httpEndpoints struct {
	admin   config.Admin
	servers []*http.Server
}

func startHTTP(s *Server, admin config.Admin) (*httpEndpoints, error) {
	h := &httpEndpoints{admin: admin}
	mux := map[string]*http.ServeMux{}
	get := func(addr string) *http.ServeMux {
		if mux[addr] == nil {
			mux[addr] = http.NewServeMux()
		}
		return mux[addr]
	}
	if a := admin.HealthAddress; a != "" {
		m := get(a)
		m.HandleFunc("/live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		m.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
			if !s.Ready() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	if a := admin.MetricsAddress; a != "" {
		get(a).HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			s.writeMetrics(w)
			metrics.WriteProcessMetrics(w)
		})
	}
	for addr, m := range mux {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("http endpoint %s: %w", addr, err)
		}
		srv := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
		h.servers = append(h.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("http endpoint stopped", "address", addr, "error", err)
			}
		}()
	}
	return h, nil
}

func (h *httpEndpoints) close() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range h.servers {
		_ = srv.Shutdown(ctx)
	}
}
