// Package dataplane runs Tern's TURN listeners: it owns every socket and
// file descriptor, feeds packets to the sans-IO engine in package turn, and
// serves health and metrics.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// Options are process-level settings that are not part of the dataplane
// config (they come from ternd's flags).
type Options struct {
	// UDPThreads is the number of SO_REUSEPORT sockets, each with its own
	// reader, per TURN-UDP listener. Default runtime.NumCPU().
	UDPThreads int
	// RelayThreads is the number of epoll workers serving relay sockets.
	// Default runtime.NumCPU().
	RelayThreads int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF of listener sockets in bytes;
	// default 4 MiB (as coturn). The kernel caps it at net.core.rmem_max.
	SocketBuffer int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is a running dataplane built from one config.
type Server struct {
	cfg    *config.Config
	opts   Options
	log    *slog.Logger
	clock  *coarseClock
	engine *turn.Engine
	relays *relayPool

	listenersMu sync.Mutex
	listeners   []*udpListener

	http     []*http.Server
	ready    atomic.Bool
	stop     chan struct{}
	bg       sync.WaitGroup
	closeOne sync.Once
}

// New builds a Server from a validated config. It opens nothing; Start does.
// It returns an error when the config cannot be turned into an engine
// (unknown auth type, bad relay address, a route naming no cluster).
func New(cfg *config.Config, opts Options) (*Server, error) {
	if opts.UDPThreads <= 0 {
		opts.UDPThreads = runtime.NumCPU()
	}
	if opts.RelayThreads <= 0 {
		opts.RelayThreads = runtime.NumCPU()
	}
	if opts.SocketBuffer == 0 {
		opts.SocketBuffer = 4 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, opts: opts, log: opts.Logger, clock: newCoarseClock(), stop: make(chan struct{})}
	bind, err := netip.ParseAddr(cfg.Relay.Address)
	if err != nil {
		return nil, fmt.Errorf("relay.address: %w", err)
	}
	var public netip.Addr
	if cfg.Relay.PublicAddress != "" {
		if public, err = netip.ParseAddr(cfg.Relay.PublicAddress); err != nil {
			return nil, fmt.Errorf("relay.publicAddress: %w", err)
		}
	}
	settings, err := engineSettings(cfg)
	if err != nil {
		return nil, err
	}
	s.relays, err = newRelayPool(s, bind, public, uint16(cfg.Relay.MinPort), uint16(cfg.Relay.MaxPort))
	if err != nil {
		return nil, fmt.Errorf("relay workers: %w", err)
	}
	s.engine, err = turn.New(turn.Config{
		Settings: settings,
		Relays:   s.relays,
		Clock:    s.clock,
		Logger:   s.log,
		Software: "tern",
	})
	if err != nil {
		s.relays.close()
		return nil, err
	}
	return s, nil
}

// engineSettings maps the config's auth and limits to the engine's.
func engineSettings(cfg *config.Config) (turn.Settings, error) {
	st := turn.Settings{
		Realm:              cfg.Auth.Realm,
		MaxLifetime:        time.Duration(cfg.Limits.MaxLifetime) * time.Second,
		NonceLifetime:      time.Duration(cfg.Limits.NonceLifetime) * time.Second,
		AllocationsPerUser: cfg.Limits.AllocationsPerUser,
		AllocationsPerIP:   cfg.Limits.AllocationsPerIP,
		MaxAllocations:     cfg.Limits.MaxAllocations,
	}
	switch cfg.Auth.Type {
	case config.AuthStatic:
		st.Auth = turn.StaticAuth{Username: cfg.Auth.Username, Password: cfg.Auth.Password}
	case config.AuthEphemeral:
		st.Auth = turn.EphemeralAuth{Secret: cfg.Auth.SharedSecret}
	default:
		return st, fmt.Errorf("auth.type: unknown %q", cfg.Auth.Type)
	}
	return st, nil
}

// ownAddrs are the dataplane's own addresses, which peers may be only when a
// cluster names them explicitly.
func (s *Server) ownAddrs() []netip.Addr {
	var own []netip.Addr
	for _, l := range s.cfg.Listeners {
		if a, err := netip.ParseAddr(l.Address); err == nil {
			own = append(own, a)
		}
	}
	return append(own, s.relays.bind, s.relays.public)
}

// Start opens the health and metrics endpoints and every listener, and
// starts the clock and the expiry sweep. It returns the first error; what
// was opened before it stays open until Close.
func (s *Server) Start() error {
	s.bg.Add(1)
	go s.background()
	if err := s.startHTTP(); err != nil {
		return err
	}
	for _, lc := range s.cfg.Listeners {
		pol, err := newPolicy(lc.Routes, s.cfg.Clusters, s.ownAddrs())
		if err != nil {
			return fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		if lc.Protocol != config.ProtoTURNUDP {
			return fmt.Errorf("listener %q: protocol %s is not supported yet", lc.Name, lc.Protocol)
		}
		l, err := s.startUDP(lc, pol, s.opts.UDPThreads)
		if err != nil {
			return err
		}
		s.listenersMu.Lock()
		s.listeners = append(s.listeners, l)
		s.listenersMu.Unlock()
		s.log.Info("listener started", "name", lc.Name, "protocol", lc.Protocol, "address", l.addr.String(), "threads", len(l.socks))
	}
	s.ready.Store(true)
	return nil
}

// Ready reports whether the listeners are up and the server is not draining.
func (s *Server) Ready() bool { return s.ready.Load() }

// Engine returns the TURN engine, for tests and metrics.
func (s *Server) Engine() *turn.Engine { return s.engine }

// Close stops the listeners, deletes every allocation (closing relay
// sockets) and stops the HTTP endpoints. It is safe to call more than once.
func (s *Server) Close() {
	s.closeOne.Do(func() {
		s.ready.Store(false)
		s.listenersMu.Lock()
		ls := s.listeners
		s.listeners = nil
		s.listenersMu.Unlock()
		for _, l := range ls {
			l.close()
		}
		s.engine.Close()
		s.relays.close()
		close(s.stop)
		s.bg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, h := range s.http {
			_ = h.Shutdown(ctx)
		}
	})
}

// background advances the coarse clock every few milliseconds and sweeps
// expired allocations, permissions, channels and reservations every second.
func (s *Server) background() {
	defer s.bg.Done()
	tick := time.NewTicker(coarseClockPeriod)
	defer tick.Stop()
	lastSweep := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			s.clock.set(now)
			if now.Sub(lastSweep) >= time.Second {
				lastSweep = now
				s.engine.Sweep()
				s.relays.sweep(now)
			}
		}
	}
}

// startHTTP serves /live and /ready on the health address and /metrics on
// the metrics address (they may be the same).
func (s *Server) startHTTP() error {
	mux := map[string]*http.ServeMux{}
	get := func(addr string) *http.ServeMux {
		if mux[addr] == nil {
			mux[addr] = http.NewServeMux()
		}
		return mux[addr]
	}
	if a := s.cfg.Admin.HealthAddress; a != "" {
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
	if a := s.cfg.Admin.MetricsAddress; a != "" {
		get(a).HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			s.writeMetrics(w)
			metrics.WriteProcessMetrics(w)
		})
	}
	for addr, m := range mux {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("http endpoint %s: %w", addr, err)
		}
		h := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
		s.http = append(s.http, h)
		go func() {
			if err := h.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("http endpoint stopped", "address", addr, "error", err)
			}
		}()
	}
	return nil
}
