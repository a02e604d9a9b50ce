// Package dataplane runs a Tern dataplane: it builds the TURN engine
// (package turn) with a relay pool (dataplane/relay), starts and stops the
// listeners (dataplane/listener) a config names, applies config changes by
// the reconcile rules of docs/config-reference.md ("Live reconfiguration"),
// and serves health and metrics (dataplane/admin). The packet path lives in
// the listener and relay packages; this one is its lifecycle.
package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/alternates"
	"github.com/tern-gw/tern/dataplane/coarseclock"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/loglevel"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/enginesettings"
	"github.com/tern-gw/tern/dataplane/listener"
	"github.com/tern-gw/tern/dataplane/memlimit"
	"github.com/tern-gw/tern/dataplane/mountwatch"
	"github.com/tern-gw/tern/dataplane/offload/mirror"
	"github.com/tern-gw/tern/dataplane/relay"
	"github.com/tern-gw/tern/dataplane/relaybind"
	"github.com/tern-gw/tern/dataplane/secretfile"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// Options are process-level settings that are not part of the dataplane
// config (they come from ternd's flags).
type Options struct {
	// UDPThreads is the number of SO_REUSEPORT sockets, each with its own
	// reader thread, per TURN-UDP listener. Default runtime.NumCPU().
	UDPThreads int
	// RelayThreads is the number of epoll workers serving relay sockets.
	// Default runtime.NumCPU().
	RelayThreads int
	// IOMode selects how workers wait for packets on Linux: IOThreads
	// (the default: each worker blocks in recvmmsg or epoll_wait in its
	// own thread, and GOMAXPROCS is raised by one per worker, see
	// internal/sysblock) or IOPoller (non-blocking sockets parked in the Go
	// netpoller, which costs a scheduler wake-up per batch: 1.8x the CPU
	// per packet at 20k packets/s and 1.25x at 50k, see bench/PROFILE.md).
	// Elsewhere both select the portable mode.
	IOMode string
	// GSO sends runs of same-size datagrams to one destination as one
	// UDP_SEGMENT message (Linux 4.18+; ignored where unsupported).
	GSO bool
	// StrictChannelNumbers limits ChannelBind to RFC 8656 §12's channel
	// numbers 0x4000-0x4FFF whatever the config says (by default RFC
	// 5766's 0x4000-0x7FFF are accepted): ternd --strict-channel-numbers,
	// which a Dataplane's args can carry where its rendered config cannot.
	StrictChannelNumbers bool
	// StateBudgetMiB, when not 0, overrides the config's
	// limits.stateBudgetMiB (ternd --state-budget-mib): MiB, or negative
	// for no state budget.
	StateBudgetMiB int
	// MemoryLimit is the container's memory limit in bytes, from which
	// the default state budget is derived (half of it); 0 reads it from
	// the cgroup (memlimit.Read), negative means none.
	MemoryLimit int64
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF of listener sockets in bytes;
	// default 4 MiB (as coturn).
	SocketBuffer int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// LogLevel, when set, follows the config's admin.logLevel on every
	// reconfiguration.
	LogLevel *slog.LevelVar
	// DNS answers STRICT_DNS clusters' lookups; default net.DefaultResolver.
	DNS allowlist.Lookuper
	// DNSInterval is how often STRICT_DNS host names are re-resolved;
	// default allowlist.DefaultResolveInterval (5 s).
	DNSInterval time.Duration
	// NoCounters leaves the per-worker packet and byte counters of the
	// relay path alone (ternd --packet-counters=false): /metrics then
	// reports 0 for the listener, cluster, peer and byte counters. It is
	// there to measure what counting costs (BENCHMARKS.md).
	NoCounters bool
	// OffloadEngine, when set, overrides the config's offload.engine
	// (ternd --offload-engine): None, Auto, XDP or TC, case-insensitive.
	OffloadEngine string
	// OffloadAttach, when set, overrides the config's offload.attach
	// (ternd --offload-attach): Auto, TCX or Clsact, case-insensitive.
	OffloadAttach string
	// Linger is how long UDP listener and relay workers (threads mode)
	// sleep between polls while datagrams reach them closer together than
	// that, instead of waking for each (internal/sysblock.Linger); 0, the
	// default, wakes them for each datagram (ternd --linger).
	Linger time.Duration

	// deferOffload: Takeover's; the offload is adopted from the
	// predecessor (mirror.Deferred), not opened.
	deferOffload bool
}

// I/O modes of Options.IOMode.
const (
	IOPoller  = string(udpio.Poller)
	IOThreads = string(udpio.Threads)
)

// Server is a running dataplane.
type Server struct {
	// configsRejected is ConfigRejected's count.
	configsRejected atomic.Uint64

	opts   Options
	log    *slog.Logger
	clock  *coarseclock.Clock
	engine *turn.Engine
	relays *relay.Pool
	dns    *allowlist.Resolver // STRICT_DNS clusters' answers; see dns.go
	// offload mirrors the engine's channel paths into the kernel fast
	// path (dataplane/offload/mirror); nil with offload engine None.
	offload *mirror.Mirror
	// secrets re-reads credential files when they change; see
	// credentials.go. Nil until Start.
	secrets *mountwatch.Dirs
	// auth is the engine's authenticator in force, to tell whether
	// re-read credential files changed it. Guarded by mu.
	auth turn.Authenticator

	// Lock order: changeMu, then mu, then listenersMu. Nothing that holds
	// mu or listenersMu opens or closes a socket.
	//
	// changeMu serializes Start, Reconfigure and Close: what starts and
	// stops listeners and the admin endpoints (http), which it guards.
	changeMu sync.Mutex
	// mu guards the config in force (cfg), auth and closed, and makes the
	// engine's settings change with them in one step.
	mu     sync.Mutex
	cfg    *config.Config
	closed bool

	listenersMu sync.Mutex // guards listeners and retired, which /metrics reads
	listeners   map[string]listener.Listener
	// retired are the counters of stopped listeners by name, which a
	// listener of the same name carries on from (metrics.go).
	retired map[string]*listenerCounts
	// carried are the counter values a predecessor handed over (carry.go),
	// added to this process's series of the same name at each scrape.
	carried map[string]float64
	// clusterIDs numbers clusters for the per-cluster counters, and
	// clusters are the names of the config in force, for /metrics.
	clusterIDs allowlist.ClusterIDs
	clusters   atomic.Pointer[[]string]

	http     *admin.Endpoints
	ready    atomic.Bool
	draining atomic.Bool
	stop     chan struct{}
	bg       sync.WaitGroup

	// handoverLn is the hand-over socket (ServeHandover), nil without
	// one; handedOver is closed once a successor has taken over; while
	// sweepPaused the background sweep holds off (a hand-over is taking
	// the allocation table). See handover.go.
	handoverLn  *net.UnixListener
	handedOver  chan struct{}
	sweepPaused atomic.Bool

	// listenerHook, when set (by a test, before the first Reconfigure), is
	// called just before a listener opens or closes its sockets.
	listenerHook func()
}

// New builds a Server from a config. It opens nothing but the relay
// workers; Start opens the listeners. It returns an error when the config
// is invalid or cannot be turned into an engine.
func New(cfg *config.Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.UDPThreads <= 0 {
		opts.UDPThreads = runtime.NumCPU()
	}
	if opts.RelayThreads <= 0 {
		opts.RelayThreads = runtime.NumCPU()
	}
	switch opts.IOMode {
	case "":
		opts.IOMode = IOThreads
	case IOPoller, IOThreads:
	default:
		return nil, fmt.Errorf("io mode %q: want %s or %s", opts.IOMode, IOPoller, IOThreads)
	}
	if opts.SocketBuffer == 0 {
		opts.SocketBuffer = 4 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, log: opts.Logger, clock: coarseclock.New(), cfg: cfg,
		listeners: map[string]listener.Listener{}, retired: map[string]*listenerCounts{}, stop: make(chan struct{}), handedOver: make(chan struct{})}
	if s.opts.MemoryLimit == 0 {
		s.opts.MemoryLimit, _ = memlimit.Read()
	}
	s.setClusters(cfg)
	settings, err := s.settingsFor(cfg)
	warnDeprecated(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	mode, err := mirror.Mode(cfg, opts.OffloadEngine)
	if err != nil {
		return nil, err
	}
	attach, err := mirror.Attach(cfg, opts.OffloadAttach)
	if err != nil {
		return nil, err
	}
	s.relays, err = relay.NewPool(relaybind.Addresses(cfg.Relay, opts.Logger), relay.Options{Workers: opts.RelayThreads, Mode: udpio.Mode(opts.IOMode), GSO: opts.GSO, NoCounters: opts.NoCounters, Linger: opts.Linger})
	if err != nil {
		return nil, fmt.Errorf("relay workers: %w", err)
	}
	var paths turn.PathObserver
	switch {
	case opts.deferOffload:
		// A successor of a hand-over (Takeover): the programs are the
		// predecessor's, adopted and activated once it confirmed; the
		// engine reports its paths from the first import on.
		s.offload = mirror.Deferred(mode, attach, cfg, relaybind.Addresses(cfg.Relay, slog.New(slog.DiscardHandler)), s.log)
		if mode != offloadmode.None {
			paths = s.offload
		}
	case mode != offloadmode.None:
		// The mirror takes the relay addresses the sockets bind, as the
		// pool does (relaybind.Addresses logged them already).
		if s.offload, err = mirror.Open(mode, attach, cfg, relaybind.Addresses(cfg.Relay, slog.New(slog.DiscardHandler)), s.log); err != nil {
			s.relays.Close()
			return nil, err
		}
		// A fallen-back Auto needs no observer: nothing is mirrored.
		if s.offload.Active() {
			paths = s.offload
		}
	}
	s.engine, err = turn.New(turn.Config{Settings: settings, Relays: s.relays, RelayCost: s.relays.RelayCost(), Clock: s.clock, Logger: s.log, Software: "tern", PathObserver: paths})
	if err != nil {
		s.relays.Close()
		if s.offload != nil {
			s.offload.Close()
		}
		return nil, err
	}
	s.relays.Start(s.engine)
	s.log.Info("state budget for allocations, permissions and channel bindings", "bytes", settings.StateBudget,
		"memoryLimit", max(s.opts.MemoryLimit, 0))
	s.auth = settings.Auth
	s.setLogLevel(cfg)
	s.dns = allowlist.NewResolver(opts.DNS, opts.DNSInterval, s.log, s.refreshAllowlists)
	return s, nil
}

// settingsFor is enginesettings.From(cfg) with what ternd's flags add or
// override (strict channel numbers and the state budget: memlimit) and
// the alternates, resolved (alternates.Resolve).
func (s *Server) settingsFor(cfg *config.Config) (turn.Settings, error) {
	st, err := enginesettings.From(cfg)
	st.StrictChannelNumbers = st.StrictChannelNumbers || s.opts.StrictChannelNumbers
	st.StateBudget = memlimit.StateBudget(s.opts.StateBudgetMiB, cfg.Limits.StateBudgetMiB, max(s.opts.MemoryLimit, 0))
	st.Alternates = alternates.Resolve(cfg, net.DefaultResolver.LookupNetIP, s.log)
	return st, err
}

// setClusters publishes cfg's cluster names for /metrics.
func (s *Server) setClusters(cfg *config.Config) {
	names := make([]string, len(cfg.Clusters))
	for i, c := range cfg.Clusters {
		names[i] = c.Name
	}
	s.clusters.Store(&names)
}

// clusterNames returns the names of the clusters of the config in force.
func (s *Server) clusterNames() []string { return *s.clusters.Load() }

func (s *Server) setLogLevel(cfg *config.Config) {
	if s.opts.LogLevel == nil {
		return
	}
	if lvl, err := loglevel.Parse(cfg.Admin.LogLevel); err == nil {
		s.opts.LogLevel.Set(lvl)
	}
}

// ownAddrs is the dataplane itself as its allowlists see it: its own
// addresses, which peers may be only when a cluster names them explicitly,
// and its UDP listeners' ports, which no cluster opens on them.
func (s *Server) ownAddrs(cfg *config.Config) allowlist.Self {
	return allowlist.SelfOf(cfg.Listeners, s.relays.OwnAddrs())
}

// Start opens the health and metrics endpoints and every listener, and
// starts the clock and the expiry sweep. A listener that fails to start
// (port in use, missing certificate) is reported in the returned error and
// the others still start; the server is ready when at least one runs.
func (s *Server) Start() error {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	s.bg.Add(2)
	go s.background()
	go s.balance()
	s.secrets = s.watchSecrets(secretfile.Files(cfg.Auth))
	var err error
	if s.http, err = s.startAdmin(cfg.Admin); err != nil {
		return err
	}
	s.dns.SetClusters(cfg.Clusters)
	err = s.startListeners(cfg, cfg.Listeners)
	s.ready.Store(s.running() > 0)
	return err
}

// running returns how many listeners run.
func (s *Server) running() int {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	return len(s.listeners)
}

// startListeners starts lcs, collecting the errors of those that fail.
func (s *Server) startListeners(cfg *config.Config, lcs []config.Listener) error {
	var errs []error
	for _, lc := range lcs {
		if err := s.startListener(cfg, lc); err != nil {
			s.log.Error("listener failed to start", "name", lc.Name, "protocol", lc.Protocol, "error", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Server) startListener(cfg *config.Config, lc config.Listener) error {
	al, err := allowlist.Build(lc.Routes, cfg.Clusters, s.ownAddrs(cfg), s.dns.Lookup, &s.clusterIDs)
	if err != nil {
		return fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	if s.listenerHook != nil {
		s.listenerHook()
	}
	l, err := listener.Start(s.listenerEnv(cfg), lc, al)
	if err != nil {
		return err
	}
	s.listenersMu.Lock()
	s.listeners[lc.Name] = l
	s.listenersMu.Unlock()
	s.log.Info("listener started", "name", lc.Name, "protocol", lc.Protocol, "address", l.LocalAddr())
	return nil
}

// connLimits are the connection limits of cfg. A connection with an
// allocation may stay idle until the longest allocation lifetime has
// passed: its client refreshes the allocation before then.
func connLimits(cfg *config.Config) listener.ConnLimits {
	return listener.ConnLimits{
		IdleTimeout:          time.Duration(cfg.Limits.ConnectionIdleTimeout) * time.Second,
		AllocatedIdleTimeout: time.Duration(cfg.Limits.MaxLifetime)*time.Second + 30*time.Second,
		PartialFrameTimeout:  time.Duration(cfg.Limits.PartialFrameTimeout) * time.Second,
		PerIP:                cfg.Limits.ConnectionsPerIP,
		Max:                  cfg.Limits.MaxConnections,
	}
}

// listenerEnv is what a listener started under cfg takes from the server.
func (s *Server) listenerEnv(cfg *config.Config) listener.Env {
	return listener.Env{
		Engine:       s.engine,
		Log:          s.log,
		UDPThreads:   s.opts.UDPThreads,
		SocketBuffer: s.opts.SocketBuffer,
		Mode:         udpio.Mode(s.opts.IOMode),
		GSO:          s.opts.GSO,
		RelayWorkers: s.relays.Workers(),
		Conns:        connLimits(cfg),
		NoCounters:   s.opts.NoCounters,
		Linger:       s.opts.Linger,
	}
}

// startAdmin serves the health and metrics endpoints of a.
func (s *Server) startAdmin(a config.Admin) (*admin.Endpoints, error) {
	return admin.Start(a, admin.Handlers{Ready: s.Ready, Metrics: s.writeMetrics, Offload: s.offloadReport, Status: s.status}, s.log)
}

// offloadReport is the kernel fast path's state as ternd serves it at
// offloadmode.ReportPath.
func (s *Server) offloadReport() offloadmode.Report {
	if s.offload == nil {
		return offloadmode.Report{Requested: offloadmode.None, Attached: offloadmode.None, Reason: offloadmode.ReasonNotRequested}
	}
	return s.offload.Status().Report()
}

// stopListener stops the named listener and deletes its allocations. The
// listener stays in s.listeners, and so in /metrics, until it has stopped;
// then its final counters move to s.retired in one step, so that no scrape
// sees them missing.
func (s *Server) stopListener(name, why string) {
	s.listenersMu.Lock()
	l := s.listeners[name]
	s.listenersMu.Unlock()
	if l == nil {
		return
	}
	if s.listenerHook != nil {
		s.listenerHook()
	}
	l.Close()
	s.listenersMu.Lock()
	delete(s.listeners, name)
	s.retireLocked(name, l)
	s.listenersMu.Unlock()
	s.log.Info("listener stopped", "name", name, "reason", why)
}

// Ready reports whether listeners are up and the server is not draining.
func (s *Server) Ready() bool { return s.ready.Load() && !s.draining.Load() }

// Engine returns the TURN engine, for tests and metrics.
func (s *Server) Engine() *turn.Engine { return s.engine }

// Config returns the config in force.
func (s *Server) Config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Drain starts a graceful shutdown: /ready turns false at once and new
// allocations are redirected to the config's alternates (300 Try
// Alternate, RFC 8489 §10) or, with none, refused (508), while existing
// ones keep relaying, refreshing and binding channels until they end or
// Close is called.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.engine.SetDraining(true)
	s.log.Info("draining: new allocations are redirected to an alternate or refused", "allocations", s.engine.Allocations())
}

// Close stops the listeners, deletes every allocation (closing relay
// sockets) and stops the HTTP endpoints. It is safe to call more than once.
// After a hand-over (HandedOver) it leaves the handed-over sockets and
// allocations alone.
func (s *Server) Close() {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return
	}
	select {
	case <-s.handedOver:
		// The successor reads the listener and relay sockets now:
		// shutting them down or deleting their allocations would end its
		// calls. Only this process's own parts stop; exit closes the rest.
		s.dns.Close()
		close(s.stop)
		s.bg.Wait()
		return
	default:
	}
	s.dns.Close()
	s.ready.Store(false)
	if s.handoverLn != nil {
		s.handoverLn.Close()
	}
	s.listenersMu.Lock()
	ls := s.listeners
	s.listeners = map[string]listener.Listener{}
	s.listenersMu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	s.engine.Close()
	if s.offload != nil {
		s.offload.Close()
	}
	s.relays.Close()
	close(s.stop)
	s.bg.Wait()
	s.http.Close()
}

// background advances the coarse clock every few milliseconds and sweeps
// expired allocations, permissions, channels and reservations every second.
func (s *Server) background() {
	defer s.bg.Done()
	tick := time.NewTicker(coarseclock.Period)
	defer tick.Stop()
	lastSweep := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			s.clock.Set(now)
			if now.Sub(lastSweep) >= time.Second && !s.sweepPaused.Load() {
				lastSweep = now
				s.engine.Sweep()
				s.relays.Sweep(now)
			}
		}
	}
}
