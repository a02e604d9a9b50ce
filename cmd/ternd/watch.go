package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tern-gw/tern/dataplane/config"
)

// watchFile calls apply with the config at path whenever the file changes, until ctx ends.
// It watches the file's directory, not the file, because editors and Kubernetes ConfigMap
// volumes replace files by rename. A config that fails to load is logged and not applied;
// apply's error is logged and the running config stays. Once superseded returns true (the
// ConfigMap watch of --configmap has delivered a config), changes of the file are ignored and
// logged once: the file is the kubelet's lagging copy of that ConfigMap.
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
	// Bursts of events (write, chmod, rename) settle into one reload.
	var settle <-chan time.Time
	ignoring := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			log.Warn("config watch", "error", err)
		case ev := <-w.Events:
			if filepath.Clean(ev.Name) == abs || filepath.Base(ev.Name) == "..data" {
				settle = time.After(100 * time.Millisecond)
			}
		case <-settle:
			settle = nil
			if superseded() {
				if !ignoring {
					log.Info("config file changes ignored: the ConfigMap watch (--configmap) delivers the config", "file", path)
					ignoring = true
				}
				continue
			}
			cfg, err := load(path)
			if err != nil {
				log.Error("config file rejected, running config kept", "file", path, "error", err)
				continue
			}
			if err := apply(cfg); err != nil {
				log.Error("reconfiguration", "file", path, "error", err)
				continue
			}
			log.Info("config file applied", "file", path)
		}
	}
}
