// Command ternd is Tern's dataplane: it serves TURN from a dataplane config
// file. It takes stunnerd's flags (flags.go) and config file format
// (source.go), so that STUNner Dataplane templates and standalone stunnerd
// setups work unchanged.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/loglevel"
	"github.com/tern-gw/tern/dataplane/k8sconfig"
	"github.com/tern-gw/tern/dataplane/listener/stream"
	"github.com/tern-gw/tern/dataplane/memlimit"
	"github.com/tern-gw/tern/dataplane/stunnerdconf"
	"github.com/tern-gw/tern/dataplane/takeover"
	"github.com/tern-gw/tern/internal/version"
)

// defaultGCPercent is ternd's GOGC unless the environment sets one. The
// relay path allocates nothing, so the garbage collector runs only while
// allocations come and go, and the heap it lets grow between collections
// is what a held allocation costs in resident memory beyond its live bytes:
// at Go's default of 100 that doubled them (~1.4 KiB per allocation at 10k
// allocations), at 25 it adds a quarter, for a few more short collections
// during allocation bursts.
const defaultGCPercent = 25

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:]))
}

// run is ternd's wiring: each step is a function below, and a step's
// failure is an *exitError that says what ternd prints and exits with.
func run(args []string) int {
	f := newFlags()
	if code := f.parse(args, os.Stdout, os.Stderr); code >= 0 {
		return code
	}
	if f.showVer {
		fmt.Println(version.String("ternd"))
		return 0
	}
	if f.prepareHandoverDir != "" {
		return prepareHandoverDir(f.prepareHandoverDir, f.handoverDirOwner)
	}
	cf := &configFile{getenv: os.Getenv}
	defer cf.close()
	src, err := selectSource(f, cf, newLogger(f.logFormat, os.Stderr, slog.LevelInfo))
	if err != nil {
		return exit(err)
	}
	defer src.close()
	cfg, err := src.load(src.name)
	if err != nil {
		return exit(fail(1, "%v", err))
	}
	log, lvl, fromFlags, err := setupLogging(f, cfg)
	if err != nil {
		return exit(err)
	}
	cf.setLogger(log, src.name)

	// Signals are caught from before the listeners start.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	upgrade := make(chan os.Signal, 1)
	signal.Notify(upgrade, syscall.SIGUSR2)
	srv, err := startServer(f, cfg, lvl, fromFlags, src.name, log)
	if err != nil {
		return exit(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := startWatches(ctx, f, src, srv, log); err != nil {
		srv.Close()
		return exit(err)
	}
	defer startPprof(f.pprofAt, log)()
	startHandover(srv, cfg, log)
	log.Info("ternd serving", "config", src.name, "realm", cfg.Auth.Realm)

	if f.takeover || f.takeoverOrStart {
		notifyMainPID(log)
	}
	if handedOver, termed := waitForSignal(srv, sig, upgrade, f.grace, log); handedOver {
		// The successor serves the sockets now: Close would delete the
		// allocations it took over. A SIGTERM that came first (the pod
		// deleted while its successor took over) is not waited for again.
		if f.afterHandover == afterHandoverWait && !termed {
			waitHandedOver(srv, sig, f.grace, log)
		} else {
			drainHandedOver(srv, sig, f.grace, log)
		}
		return 0
	}
	srv.Close()
	log.Info("stopped")
	return 0
}

// handoverSocket is the config's hand-over socket path, or the default.
func handoverSocket(cfg *config.Config) string {
	return cmp.Or(cfg.Admin.HandoverSocket, takeover.DefaultSocket)
}

// startHandover opens the hand-over socket a successor takes over
// through. The default path is used only where its directory exists (made
// by the service manager, e.g. systemd's RuntimeDirectory=tern), so that
// a ternd started by hand makes no directory under /run; a path the config
// names gets its directory made. Failing to open it is logged: ternd
// serves without one.
func startHandover(srv *dataplane.Server, cfg *config.Config, log *slog.Logger) {
	path := handoverSocket(cfg)
	if cfg.Admin.HandoverSocket == "" {
		if _, err := os.Stat(filepath.Dir(path)); err != nil {
			log.Info("no hand-over socket: its default directory does not exist; create it or set admin.handoverSocket for ternd --takeover", "path", path)
			return
		}
	}
	if err := srv.ServeHandover(path); err != nil {
		log.Warn("no hand-over socket: a successor cannot take over (ternd --takeover)", "error", err)
	}
}

// takeoverStep is --takeover-exit-at's hook: it kills the process at that
// step, as a crash would, so that a test sees the old process serve on.
func takeoverStep(at string) func(dataplane.TakeoverStep) {
	if at == "" {
		return nil
	}
	return func(s dataplane.TakeoverStep) {
		if string(s) == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

// exitError is a step of run that failed: ternd exits with code, after
// printing msg as "ternd: msg" on stderr when msg is not empty (a step that
// has a logger logs instead and leaves msg empty).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// fail makes an *exitError with a message formatted as by fmt.Sprintf.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// exit prints err's message, if any, and returns its exit code (1 for an
// error that is not an *exitError).
func exit(err error) int {
	e, ok := err.(*exitError)
	if !ok {
		e = &exitError{code: 1, msg: err.Error()}
	}
	if e.msg != "" {
		fmt.Fprintln(os.Stderr, "ternd: "+e.msg)
	}
	return e.code
}

// source is where ternd's config comes from: name is the file (or
// "command line" for a turn:// URI), load reads it (again, for -w), and
// close removes what load wrote.
type source struct {
	name  string
	load  func(string) (*config.Config, error)
	close func()
	// cds is the config discovery service watch, when the config comes
	// from one (name is then its URL).
	cds *cdsSource
}

// selectSource picks the config source from the flags: -c (Tern's or
// stunnerd's config file, or a config discovery service's address), -f
// (Gateway API manifests) or stunnerd's positional turn:// URI.
// Conflicting or missing choices exit 2. log logs the config discovery
// watch until the config's logger exists.
func selectSource(f *flags, cf *configFile, log *slog.Logger) (source, error) {
	src := source{close: func() {}}
	origin, fromCDS := cdsOriginOf(f.cfgPath)
	switch {
	case f.cfgPath != "" && f.gwPath != "":
		return src, fail(2, "give either -c <config file> or -f <Gateway API manifests>, not both")
	case fromCDS:
		if f.fs.NArg() > 0 {
			return src, fail(2, "unexpected arguments %q", f.fs.Args())
		}
		if f.cmRef != "" {
			return src, fail(2, "give either a config discovery service (-c %s) or --configmap, not both", f.cfgPath)
		}
		if f.id != "" {
			log = log.With("dataplane", f.id)
		}
		cs, err := newCDSSource(origin, f.id, cf, log)
		if err != nil {
			return src, fail(2, "-c %s: %v", f.cfgPath, err)
		}
		return source{name: cs.url, load: cs.load, close: cs.close, cds: cs}, nil
	case f.cfgPath != "":
		path, err := configPath(f.cfgPath)
		if err != nil {
			from := "-c"
			if f.cfgFromEnv {
				from = "$" + envConfigOrigin
			}
			return src, fail(2, "%s: %v", from, err)
		}
		src.name, src.load = path, cf.load
	case f.gwPath != "":
		gf := &gatewayFile{gateway: f.gwName}
		src.name, src.load, src.close = f.gwPath, gf.load, gf.close
	case f.fs.NArg() == 1 && strings.HasPrefix(f.fs.Arg(0), "turn://"):
		// stunnerd's standalone form: a config made from one TURN URI.
		if f.watch {
			return src, fail(2, "-w needs a config file; a TURN URI has nothing to watch")
		}
		uri := f.fs.Arg(0)
		src.name, src.load = "command line", func(string) (*config.Config, error) { return stunnerdconf.ParseTURNURI(uri, os.Getenv) }
		return src, nil
	default:
		fmt.Fprintln(os.Stderr, "ternd: give -c <config file>, -f <Gateway API manifests>, or a turn://user:pass@address:port URI")
		f.fs.SetOutput(os.Stderr)
		f.fs.Usage()
		return src, &exitError{code: 2}
	}
	if f.fs.NArg() > 0 {
		src.close()
		return source{close: func() {}}, fail(2, "unexpected arguments %q", f.fs.Args())
	}
	return src, nil
}

// setupLogging builds ternd's logger from the flags and the config, makes
// it slog's default and logs what the flags and the log level ignore. The
// level is a LevelVar that the config's admin.logLevel keeps setting on
// reloads unless fromFlags (-l given). An invalid level exits 2.
func setupLogging(f *flags, cfg *config.Config) (log *slog.Logger, lvl *slog.LevelVar, fromFlags bool, err error) {
	lvl = new(slog.LevelVar)
	lvlName, fromFlags := f.logLevel(cfg)
	l, err := loglevel.Parse(lvlName)
	if err != nil {
		return nil, nil, false, fail(2, "-l: %v", err)
	}
	lvl.Set(l)
	log = newLogger(f.logFormat, os.Stderr, lvl)
	if name := cmp.Or(cfg.Admin.Name, f.id); name != "" {
		log = log.With("dataplane", name)
	}
	slog.SetDefault(log)
	f.logIgnored(log)
	if f.legacyChannels {
		log.Warn("--legacy-channel-numbers is deprecated and has no effect: channel numbers 0x4000-0x7FFF are accepted by default; --strict-channel-numbers narrows them to RFC 8656's 0x4000-0x4FFF")
	}
	if unknown := loglevel.UnknownScopes(lvlName); len(unknown) > 0 {
		log.Info("log level: ternd has no loggers for these scopes; their levels are ignored", "scopes", unknown, "level", lvlName)
	}
	return log, lvl, fromFlags, nil
}

// startServer builds the dataplane from cfg and the flags and starts it.
// It fails (exit 1, logged) when nothing could start; when only some
// listeners failed it logs that and serves the others.
func startServer(f *flags, cfg *config.Config, lvl *slog.LevelVar, fromFlags bool, source string, log *slog.Logger) (*dataplane.Server, error) {
	stream.SetEventLoops(f.tcpEventLoops)
	opts := dataplane.Options{UDPThreads: f.threads, RelayThreads: f.relays, SocketBuffer: f.bufs, IOMode: f.ioMode, GSO: f.gso, NoCounters: !f.packetCounters, Linger: f.linger,
		StrictChannelNumbers: f.strictChannels, OffloadEngine: f.offloadEngine, Logger: log,
		StateBudgetMiB: f.stateBudgetMiB, MemoryLimit: memoryLimit(f.memoryLimitMiB, log)}
	if !fromFlags {
		opts.LogLevel = lvl // the config's admin.logLevel stays in charge
	}
	opts.OffloadAttach = f.offloadAttach
	if f.takeover || f.takeoverOrStart {
		srv, err := dataplane.Takeover(cfg, opts, handoverSocket(cfg), takeoverStep(f.takeoverExitAt))
		switch {
		case err == nil:
			return srv, nil
		case !f.takeover && noPredecessor(err):
			// The first ternd on this host (node): nobody holds the
			// sockets.
			log.Info("no ternd to take over from; starting", "socket", handoverSocket(cfg), "reason", err.Error())
		default:
			log.Error("takeover failed; the running ternd serves on", "socket", handoverSocket(cfg), "error", err)
			return nil, &exitError{code: 1}
		}
	}
	srv, err := dataplane.New(cfg, opts)
	if err != nil {
		log.Error("cannot start the dataplane", "file", source, "error", err)
		return nil, &exitError{code: 1}
	}
	if err := srv.Start(); err != nil {
		if !srv.Ready() {
			log.Error("start failed", "error", err)
			srv.Close()
			return nil, &exitError{code: 1}
		}
		log.Error("some listeners failed to start; serving the others", "error", err)
	}
	return srv, nil
}

// memoryLimit returns the memory limit ternd runs under: flagMiB
// (--memory-limit-mib) when positive, else the container's
// (memlimit.Read); -1 when there is none. It derives the default
// state budget. With a limit, and unless GOMEMLIMIT is set, it also sets
// Go's soft memory limit to 90% of it, so that the collector works harder
// as the heap nears the limit instead of letting it grow to twice the live
// heap (GOGC) and the container be killed.
func memoryLimit(flagMiB int, log *slog.Logger) int64 {
	limit, ok := int64(flagMiB)<<20, flagMiB > 0
	if !ok {
		if limit, ok = memlimit.Read(); !ok {
			return -1
		}
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit - limit/10)
		log.Info("Go memory limit set to 90% of ternd's", "bytes", limit-limit/10, "limit", limit)
	}
	return limit
}

// startWatches starts the config watches the flags ask for, until ctx
// ends: the file's (-w) and the ConfigMap's (--configmap); with a config
// discovery service, its watch (always on, as -w is in STUNner's pods)
// starts applying configs. With
// --configmap, the ConfigMap watch is the source of truth once it has
// delivered a config: the mounted file lags it (the kubelet rewrites its
// volume on its own schedule), and applying the file then could put back
// a config the watch has already replaced. A --configmap that does not
// parse exits 2.
func startWatches(ctx context.Context, f *flags, src source, srv *dataplane.Server, log *slog.Logger) error {
	if src.cds != nil {
		// The config discovery service's watch runs since the start; from
		// now on it reconfigures the server. -w has nothing more to watch.
		src.cds.setApply(srv.Reconfigure, srv.ConfigRejected, log)
		return nil
	}
	var fromAPI atomic.Bool
	if f.cmRef != "" {
		ns, name, err := k8sconfig.ParseRef(f.cmRef, os.Getenv("POD_NAMESPACE"))
		if err != nil {
			log.Error("--configmap", "error", err)
			return &exitError{code: 2}
		}
		go func() {
			apply := func(c *config.Config) error {
				fromAPI.Store(true)
				return srv.Reconfigure(c)
			}
			if err := k8sconfig.Watch(ctx, f.kubecfg, ns, name, f.cmKey, apply, log); err != nil {
				log.Error("configmap watch stopped", "error", err)
			}
		}()
	}
	if f.watch {
		go func() {
			if err := watchFile(ctx, src.name, src.load, srv.Reconfigure, fromAPI.Load, log); err != nil {
				log.Error("config watch stopped", "error", err)
			}
		}()
	}
	return nil
}

// startPprof serves the profiling endpoints at addr when it is set and
// returns what stops them. Profiles are a debugging aid: ternd serves TURN
// without them, so a failure is logged only.
func startPprof(addr string, log *slog.Logger) (stop func()) {
	if addr == "" {
		return func() {}
	}
	pp, err := admin.StartPprof(addr, log)
	if err != nil {
		log.Error("--pprof", "error", err)
		return func() {}
	}
	log.Info("profiling endpoints", "address", addr)
	return func() { pp.Close() }
}

// waitForSignal returns after SIGINT, or after SIGTERM once the server has
// drained (drain), or with handedOver true once a successor has taken over
// (termed: while draining on SIGTERM). SIGUSR2 starts a successor
// (startSuccessor) and waits on.
func waitForSignal(srv *dataplane.Server, sig, upgrade <-chan os.Signal, grace time.Duration, log *slog.Logger) (handedOver, termed bool) {
	var s os.Signal
	for s == nil {
		select {
		case <-srv.HandedOver():
			return true, false
		case <-upgrade:
			startSuccessor(log)
		case s = <-sig:
		}
	}
	if s == syscall.SIGTERM {
		drain(srv, sig, grace, log)
		select {
		case <-srv.HandedOver():
			return true, true
		default:
		}
		return false, true
	}
	log.Info("shutting down", "signal", s.String())
	return false, false
}

// drainHandedOver waits, once this ternd has handed its TURN-UDP sockets
// to its successor, for the TCP and TLS connections that stayed with it
// to close (their listeners no longer accept: the successor does), the
// grace period to end or a signal; then ternd exits without Close, which
// would end the successor's allocations.
func drainHandedOver(srv *dataplane.Server, sig <-chan os.Signal, grace time.Duration, log *slog.Logger) {
	n := srv.StreamConnections()
	if n == 0 {
		log.Info("handed over to the successor; exiting")
		return
	}
	log.Info("handed over to the successor; TCP and TLS connections stay here until they close", "connections", n, "grace_period", grace.String())
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for srv.StreamConnections() > 0 {
		select {
		case s := <-sig:
			log.Info("signal: exiting now", "signal", s.String(), "connections", srv.StreamConnections())
			return
		case <-deadline.C:
			log.Info("grace period over", "connections", srv.StreamConnections())
			return
		case <-tick.C:
		}
	}
	log.Info("handed over to the successor; the last TCP or TLS connection closed; exiting")
}

// drainPoll is how often drain looks at the allocation count: an atomic
// load, so often enough that ternd exits within a blink of its last
// allocation ending.
const drainPoll = 50 * time.Millisecond

// drain stops taking new allocations (redirecting them to the config's
// alternates, or refusing them with 508 when there are none) and waits
// until the existing ones are gone, the grace period ends, or a second
// signal arrives.
func drain(srv *dataplane.Server, sig <-chan os.Signal, grace time.Duration, log *slog.Logger) {
	srv.Drain()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	log.Info("SIGTERM: draining; send another signal to exit at once", "allocations", srv.Engine().Allocations(),
		"alternates", len(srv.Engine().Alternates()), "grace_period", grace.String())
	for srv.Engine().Allocations() > 0 {
		select {
		case s := <-sig:
			log.Info("second signal: exiting now", "signal", s.String(), "allocations", srv.Engine().Allocations())
			return
		case <-deadline.C:
			log.Info("grace period over", "allocations", srv.Engine().Allocations())
			return
		case <-srv.HandedOver():
			log.Info("handed over to the successor while draining")
			return
		case <-tick.C:
		}
	}
	log.Info("drained: no allocations left")
}

// startSuccessor is SIGUSR2, nginx's binary upgrade: it starts the binary
// at ternd's path (the new one, after a package upgrade replaced the file)
// with ternd's arguments and --takeover, its output on ternd's. The
// successor takes over through the hand-over socket and this process then
// exits (HandedOver); if the successor fails first, this one serves on
// and logs how it exited.
func startSuccessor(log *slog.Logger) {
	exe, err := os.Executable()
	if err != nil {
		log.Error("SIGUSR2: cannot find ternd's binary", "error", err)
		return
	}
	args := os.Args[1:]
	if !slices.Contains(args, "--takeover") {
		args = append(slices.Clip(args), "--takeover")
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Error("SIGUSR2: cannot start the successor", "binary", exe, "error", err)
		return
	}
	log.Info("SIGUSR2: successor started", "binary", exe, "successorPID", cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		log.Warn("SIGUSR2: the successor exited; serving on", "successorPID", cmd.Process.Pid, "status", fmt.Sprint(err))
	}()
}

// notifyMainPID tells a service manager that speaks systemd's notify
// protocol ($NOTIFY_SOCKET) that this process, which has taken over, is
// the service's main process now (MAINPID=, sd_notify(3)). systemd takes
// it from a process other than the main one only with NotifyAccess=all.
func notifyMainPID(log *slog.Logger) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		log.Warn("NOTIFY_SOCKET", "error", err)
		return
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "MAINPID=%d\nREADY=1", os.Getpid()); err != nil {
		log.Warn("NOTIFY_SOCKET", "error", err)
	}
}
