// Command ternd is Tern's dataplane: it serves TURN from a dataplane config
// file. Its flags follow stunnerd's (-c, -l, -w, --udp-thread-num) so that
// STUNner Dataplane templates work unchanged.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/k8sconfig"
	"github.com/tern-gw/tern/internal/version"
)

// loadConfig reads a dataplane config file as the operator renders it: the
// address placeholders $(POD_IP) and $(NODE_IP) take the values of the
// environment variables the rendered Deployment sets from the downward API.
func loadConfig(path string) (*config.Config, error) {
	return config.Load(path, os.Getenv)
}

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
	fs := flag.NewFlagSet("ternd", flag.ContinueOnError)
	var (
		cfgPath = fs.String("c", "", "dataplane config file (YAML or JSON)")
		gwPath  = fs.String("f", "", "standalone mode: Gateway API manifests (GatewayClass, GatewayConfig, Gateway, routes, ...) to render the config from, as tern-operator would")
		gwName  = fs.String("gateway", "", "with -f: namespace/name of the Gateway to serve; default the first in the file")
		cmRef   = fs.String("configmap", os.Getenv("TERN_CONFIGMAP"), "watch this ConfigMap (namespace/name, or name in $POD_NAMESPACE) through the Kubernetes API and apply its config live")
		cmKey   = fs.String("configmap-key", "tern.yaml", "key of the config in the ConfigMap")
		kubecfg = fs.String("kubeconfig", "", "kubeconfig for --configmap; default $KUBECONFIG, ~/.kube/config, then in-cluster")
		level   = fs.String("l", "", "log level (debug, info, warn, error, or STUNner's all:LEVEL form); overrides the config's admin.logLevel")
		watch   = fs.Bool("w", false, "watch the config file and apply changes live")
		pprofAt = fs.String("pprof", "", "serve Go's profiling endpoints (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; off by default, never on a public address")
		threads = fs.Int("udp-thread-num", 0, "sockets (and reader threads) per TURN-UDP listener; 0 means the number of CPUs")
		relays  = fs.Int("relay-thread-num", 0, "epoll workers serving relay sockets; 0 means the number of CPUs")
		bufs    = fs.Int("socket-buffer", 4<<20, "SO_RCVBUF/SO_SNDBUF of listener sockets, bytes")
		gso     = fs.Bool("gso", true, "send runs of same-size datagrams to one destination as one UDP GSO message (Linux 4.18+; off where unsupported)")
		ioMode  = fs.String("io", dataplane.IOThreads, "how workers wait for packets: threads (blocking system calls, one thread per worker) or poller (Go netpoller)")
		grace   = fs.Duration("grace-period", time.Hour, "on SIGTERM, how long existing allocations may keep relaying before ternd exits (a second signal exits at once)")
		showVer = fs.Bool("version", false, "print the version and the git revision, and exit")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVer {
		fmt.Println(version.String("ternd"))
		return 0
	}
	if (*cfgPath == "") == (*gwPath == "") {
		fmt.Fprintln(os.Stderr, "ternd: give either -c <config file> or -f <Gateway API manifests>")
		fs.Usage()
		return 2
	}
	var (
		source = *cfgPath
		load   = loadConfig
	)
	if *gwPath != "" {
		gf := &gatewayFile{gateway: *gwName}
		defer gf.close()
		source, load = *gwPath, gf.load
	}
	cfg, err := load(source)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ternd: %v\n", err)
		return 1
	}
	lvl := new(slog.LevelVar)
	lvlName := cfg.Admin.LogLevel
	if *level != "" {
		lvlName = *level
	}
	l, err := config.ParseLogLevel(lvlName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ternd: -l: %v\n", err)
		return 2
	}
	lvl.Set(l)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if cfg.Admin.Name != "" {
		log = log.With("dataplane", cfg.Admin.Name)
	}
	slog.SetDefault(log)

	opts := dataplane.Options{UDPThreads: *threads, RelayThreads: *relays, SocketBuffer: *bufs, IOMode: *ioMode, GSO: *gso, Logger: log}
	if *level == "" {
		opts.LogLevel = lvl // the config's admin.logLevel stays in charge
	}
	srv, err := dataplane.New(cfg, opts)
	if err != nil {
		log.Error("invalid config", "file", source, "error", err)
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
	if *watch {
		go func() {
			if err := watchFile(ctx, source, load, srv, log); err != nil {
				log.Error("config watch stopped", "error", err)
			}
		}()
	}
	if *cmRef != "" {
		ns, name, err := k8sconfig.ParseRef(*cmRef, os.Getenv("POD_NAMESPACE"))
		if err != nil {
			log.Error("--configmap", "error", err)
			srv.Close()
			return 2
		}
		go func() {
			if err := k8sconfig.Watch(ctx, *kubecfg, ns, name, *cmKey, srv.Reconfigure, log); err != nil {
				log.Error("configmap watch stopped", "error", err)
			}
		}()
	}
	if *pprofAt != "" {
		// Profiles are a debugging aid: ternd serves TURN without them.
		if pp, err := admin.StartPprof(*pprofAt, log); err != nil {
			log.Error("--pprof", "error", err)
		} else {
			log.Info("profiling endpoints", "address", *pprofAt)
			defer pp.Close()
		}
	}
	log.Info("ternd serving", "config", source, "realm", cfg.Auth.Realm)

	s := <-sig
	if s == syscall.SIGTERM {
		drain(srv, sig, *grace, log)
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
