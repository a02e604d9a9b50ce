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
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/config"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("ternd", flag.ContinueOnError)
	var (
		cfgPath = fs.String("c", "", "dataplane config file (YAML or JSON)")
		level   = fs.String("l", "", "log level (debug, info, warn, error, or STUNner's all:LEVEL form); overrides the config's admin.logLevel")
		watch   = fs.Bool("w", false, "watch the config file and apply changes live")
		threads = fs.Int("udp-thread-num", 0, "sockets (and reader threads) per TURN-UDP listener; 0 means the number of CPUs")
		relays  = fs.Int("relay-thread-num", 0, "epoll workers serving relay sockets; 0 means the number of CPUs")
		bufs    = fs.Int("socket-buffer", 4<<20, "SO_RCVBUF/SO_SNDBUF of listener sockets, bytes")
		ioMode  = fs.String("io", dataplane.IOPoller, "how workers wait for packets: poller (Go netpoller) or threads (blocking syscalls on locked OS threads)")
		grace   = fs.Duration("grace-period", time.Hour, "on SIGTERM, how long existing allocations may keep relaying before ternd exits (a second signal exits at once)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintln(os.Stderr, "ternd: -c <config file> is required")
		fs.Usage()
		return 2
	}
	cfg, err := config.Load(*cfgPath)
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

	opts := dataplane.Options{UDPThreads: *threads, RelayThreads: *relays, SocketBuffer: *bufs, IOMode: *ioMode, Logger: log}
	if *level == "" {
		opts.LogLevel = lvl // the config's admin.logLevel stays in charge
	}
	srv, err := dataplane.New(cfg, opts)
	if err != nil {
		log.Error("invalid config", "file", *cfgPath, "error", err)
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
			if err := watchFile(ctx, *cfgPath, srv, log); err != nil {
				log.Error("config watch stopped", "error", err)
			}
		}()
	}
	log.Info("ternd serving", "config", *cfgPath, "realm", cfg.Auth.Realm)

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
