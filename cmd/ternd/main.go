// Command ternd is Tern's dataplane: it serves TURN from a dataplane config
// file. Its flags follow stunnerd's (-c, -l, -w, --udp-thread-num) so that
// STUNner Dataplane templates work unchanged.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/config"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("ternd", flag.ContinueOnError)
	var (
		cfgPath  = fs.String("c", "", "dataplane config file (YAML or JSON)")
		level    = fs.String("l", "", "log level (debug, info, warn, error, or STUNner's all:LEVEL form); overrides the config's admin.logLevel")
		watch    = fs.Bool("w", false, "watch the config file and apply changes (accepted for stunnerd compatibility)")
		threads  = fs.Int("udp-thread-num", 0, "sockets (and reader threads) per TURN-UDP listener; 0 means the number of CPUs")
		sockBufs = fs.Int("socket-buffer", 4<<20, "SO_RCVBUF/SO_SNDBUF of listener sockets, bytes")
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
	lvlName := cfg.Admin.LogLevel
	if *level != "" {
		lvlName = *level
	}
	lvl, err := config.ParseLogLevel(lvlName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ternd: -l: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if cfg.Admin.Name != "" {
		log = log.With("dataplane", cfg.Admin.Name)
	}
	slog.SetDefault(log)
	if *watch {
		log.Warn("-w: config file watching is not implemented yet; restart ternd to apply changes")
	}

	srv, err := dataplane.New(cfg, dataplane.Options{UDPThreads: *threads, SocketBuffer: *sockBufs, Logger: log})
	if err != nil {
		log.Error("invalid config", "file", *cfgPath, "error", err)
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if err := srv.Start(); err != nil {
		log.Error("start failed", "error", err)
		srv.Close()
		return 1
	}
	log.Info("ternd serving", "config", *cfgPath, "realm", cfg.Auth.Realm)
	s := <-sig
	log.Info("shutting down", "signal", s.String())
	srv.Close()
	log.Info("stopped")
	return 0
}
