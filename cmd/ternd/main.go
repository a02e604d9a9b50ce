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
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/k8sconfig"
	"github.com/tern-gw/tern/dataplane/stunnerdconf"
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

func run(args []string) int {
	f := newFlags()
	if code := f.parse(args, os.Stdout, os.Stderr); code >= 0 {
		return code
	}
	if f.showVer {
		fmt.Println(version.String("ternd"))
		return 0
	}
	var (
		source string
		load   func(string) (*config.Config, error)
		cf     = &configFile{getenv: os.Getenv}
	)
	defer cf.close()
	switch {
	case f.cfgPath != "" && f.gwPath != "":
		fmt.Fprintln(os.Stderr, "ternd: give either -c <config file> or -f <Gateway API manifests>, not both")
		return 2
	case f.cfgPath != "":
		path, err := configPath(f.cfgPath)
		if err != nil {
			from := "-c"
			if f.cfgFromEnv {
				from = "$" + envConfigOrigin
			}
			fmt.Fprintf(os.Stderr, "ternd: %s: %v\n", from, err)
			return 2
		}
		source, load = path, cf.load
	case f.gwPath != "":
		gf := &gatewayFile{gateway: f.gwName}
		defer gf.close()
		source, load = f.gwPath, gf.load
	case f.fs.NArg() == 1 && strings.HasPrefix(f.fs.Arg(0), "turn://"):
		// stunnerd's standalone form: a config made from one TURN URI.
		uri := f.fs.Arg(0)
		source, load = "command line", func(string) (*config.Config, error) { return stunnerdconf.ParseTURNURI(uri, os.Getenv) }
		if f.watch {
			fmt.Fprintln(os.Stderr, "ternd: -w needs a config file; a TURN URI has nothing to watch")
			return 2
		}
	default:
		fmt.Fprintln(os.Stderr, "ternd: give -c <config file>, -f <Gateway API manifests>, or a turn://user:pass@address:port URI")
		f.fs.SetOutput(os.Stderr)
		f.fs.Usage()
		return 2
	}
	if f.fs.NArg() > 0 && source != "command line" {
		fmt.Fprintf(os.Stderr, "ternd: unexpected arguments %q\n", f.fs.Args())
		return 2
	}
	cfg, err := load(source)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ternd: %v\n", err)
		return 1
	}
	lvl := new(slog.LevelVar)
	lvlName, fromFlags := f.logLevel(cfg)
	l, err := config.ParseLogLevel(lvlName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ternd: -l: %v\n", err)
		return 2
	}
	lvl.Set(l)
	log := newLogger(f.logFormat, os.Stderr, lvl)
	if name := cmp.Or(cfg.Admin.Name, f.id); name != "" {
		log = log.With("dataplane", name)
	}
	slog.SetDefault(log)
	f.logIgnored(log)
	if f.legacyChannels {
		log.Warn("--legacy-channel-numbers is deprecated and has no effect: channel numbers 0x4000-0x7FFF are accepted by default; --strict-channel-numbers narrows them to RFC 8656's 0x4000-0x4FFF")
	}
	if unknown := config.UnknownLogScopes(lvlName); len(unknown) > 0 {
		log.Info("log level: ternd has no loggers for these scopes; their levels are ignored", "scopes", unknown, "level", lvlName)
	}
	cf.setLogger(log, source)

	opts := dataplane.Options{UDPThreads: f.threads, RelayThreads: f.relays, SocketBuffer: f.bufs, IOMode: f.ioMode, GSO: f.gso, NoCounters: !f.packetCounters, Linger: f.linger,
		StrictChannelNumbers: f.strictChannels, OffloadEngine: f.offloadEngine, Logger: log}
	if !fromFlags {
		opts.LogLevel = lvl // the config's admin.logLevel stays in charge
	}
	srv, err := dataplane.New(cfg, opts)
	if err != nil {
		log.Error("cannot start the dataplane", "file", source, "error", err)
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if err := srv.Start(); err != nil {
		if !srv.Ready() {
			log.Error("start failed", "error", err)
			srv.Close()
			return 1
		}
		log.Error("some listeners failed to start; serving the others", "error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// With --configmap, the ConfigMap watch is the source of truth once it has delivered a
	// config: the mounted file lags it (the kubelet rewrites its volume on its own schedule),
	// and applying the file then could put back a config the watch has already replaced.
	var fromAPI atomic.Bool
	if f.watch {
		go func() {
			if err := watchFile(ctx, source, load, srv.Reconfigure, fromAPI.Load, log); err != nil {
				log.Error("config watch stopped", "error", err)
			}
		}()
	}
	if f.cmRef != "" {
		ns, name, err := k8sconfig.ParseRef(f.cmRef, os.Getenv("POD_NAMESPACE"))
		if err != nil {
			log.Error("--configmap", "error", err)
			srv.Close()
			return 2
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
	if f.pprofAt != "" {
		// Profiles are a debugging aid: ternd serves TURN without them.
		if pp, err := admin.StartPprof(f.pprofAt, log); err != nil {
			log.Error("--pprof", "error", err)
		} else {
			log.Info("profiling endpoints", "address", f.pprofAt)
			defer pp.Close()
		}
	}
	log.Info("ternd serving", "config", source, "realm", cfg.Auth.Realm)

	s := <-sig
	if s == syscall.SIGTERM {
		drain(srv, sig, f.grace, log)
	} else {
		log.Info("shutting down", "signal", s.String())
	}
	srv.Close()
	log.Info("stopped")
	return 0
}

// drain refuses new allocations and waits until the existing ones are gone,
// the grace period ends, or a second signal arrives.
func drain(srv *dataplane.Server, sig <-chan os.Signal, grace time.Duration, log *slog.Logger) {
	srv.Drain()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	log.Info("SIGTERM: draining; send another signal to exit at once", "allocations", srv.Engine().Allocations(), "grace_period", grace.String())
	for srv.Engine().Allocations() > 0 {
		select {
		case s := <-sig:
			log.Info("second signal: exiting now", "signal", s.String(), "allocations", srv.Engine().Allocations())
			return
		case <-deadline.C:
			log.Info("grace period over", "allocations", srv.Engine().Allocations())
			return
		case <-tick.C:
		}
	}
	log.Info("drained: no allocations left")
}
