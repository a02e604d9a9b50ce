package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/config"
)

// watchFile applies path to srv whenever it changes, until ctx ends. It
// watches the file's directory, not the file, because editors and
// Kubernetes ConfigMap volumes replace files by rename. A config that fails
// to load or validate is logged and the running one stays.
func watchFile(ctx context.Context, path string, load func(string) (*config.Config, error), srv *dataplane.Server, log *slog.Logger) error {
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
			cfg, err := load(path)
			if err != nil {
				log.Error("config file rejected, running config kept", "file", path, "error", err)
				continue
			}
			if err := srv.Reconfigure(cfg); err != nil {
				log.Error("reconfiguration", "file", path, "error", err)
				continue
			}
			log.Info("config file applied", "file", path)
		}
	}
}
