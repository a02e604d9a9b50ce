package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/mountwatch"
)

// The config file's watch settles a burst of events (write, chmod, rename)
// into one reload after configDebounce, and re-reads the file every
// configPollInterval in case a change went unnoticed (a watch that failed).
const (
	configDebounce     = 100 * time.Millisecond
	configPollInterval = 30 * time.Second
)

// watchFile calls apply with the config at path whenever the file's content changes, until
// ctx ends. It watches the file's directory, not the file, because editors and Kubernetes
// ConfigMap volumes replace files by rename, and leaves the debounce and the poll to
// mountwatch.Loop, as the certificate and credential watches do. A reload whose bytes are
// those last read does nothing, so events of other files of the directory and the poll cost a
// read. A config that fails to load is logged (once per content) and not applied; apply's
// error is logged and the running config stays. Once superseded returns true (the ConfigMap
// watch of --configmap has delivered a config), changes of the file are ignored and logged
// once: the file is the kubelet's lagging copy of that ConfigMap.
func watchFile(ctx context.Context, path string, load func(string) (*config.Config, error), apply func(*config.Config) error, superseded func() bool, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return err
	}
	// What ternd started with, as far as the watch can tell: the file as it
	// is once the watch is set up.
	last, _ := os.ReadFile(path)
	ignoring := false
	reload := func() {
		if superseded() {
			if !ignoring {
				log.Info("config file changes ignored: the ConfigMap watch (--configmap) delivers the config", "file", path)
				ignoring = true
			}
			return
		}
		data, err := os.ReadFile(path)
		if err != nil || bytes.Equal(data, last) {
			// A file caught mid-replace, or gone, is left to load's next
			// read once it is back; nothing changed otherwise.
			return
		}
		last = data
		cfg, err := load(path)
		if err != nil {
			log.Error("config file rejected, running config kept", "file", path, "error", err)
			return
		}
		if err := apply(cfg); err != nil {
			log.Error("reconfiguration", "file", path, "error", err)
			return
		}
		log.Info("config file applied", "file", path)
	}
	mountwatch.Loop(ctx.Done(), w, configPollInterval, configDebounce,
		func(err error) { log.Warn("config watch", "error", err) }, reload)
	return nil
}
