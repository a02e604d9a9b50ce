package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
)

// msgHandler sends each log record's message to a channel.
type msgHandler struct{ msgs chan string }

func (h msgHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h msgHandler) Handle(_ context.Context, r slog.Record) error {
	h.msgs <- r.Message
	return nil
}
func (h msgHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h msgHandler) WithGroup(string) slog.Handler      { return h }

// TestWatchFileSuperseded: a changed file is applied until the ConfigMap watch has delivered a
// config; after that, changes are ignored (logged once) and apply is not called.
func TestWatchFileSuperseded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		superseded bool
		wantMsg    string
	}{
		{"file is the source", false, "config file applied"},
		{"configmap watch delivered", true, "config file changes ignored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tern.yaml")
			if err := os.WriteFile(path, []byte("v1"), 0o644); err != nil {
				t.Fatal(err)
			}
			var loaded, applied atomic.Int32
			load := func(string) (*config.Config, error) {
				loaded.Add(1)
				return &config.Config{}, nil
			}
			apply := func(*config.Config) error {
				applied.Add(1)
				return nil
			}
			msgs := make(chan string, 16)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- watchFile(ctx, path, load, apply, func() bool { return tc.superseded }, slog.New(msgHandler{msgs}))
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			// The watch may start after a first write: write until a record arrives.
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(20 * time.Second)
			for i := 0; ; i++ {
				select {
				case msg := <-msgs:
					if !strings.HasPrefix(msg, tc.wantMsg) {
						t.Fatalf("log %q, want %q", msg, tc.wantMsg)
					}
					// The record is written after apply (or instead of it), in the same goroutine.
					if got := applied.Load(); tc.superseded && (got != 0 || loaded.Load() != 0) {
						t.Errorf("superseded: loaded %d and applied %d times, want neither", loaded.Load(), got)
					} else if !tc.superseded && got == 0 {
						t.Error("not applied")
					}
					return
				case <-tick.C:
					if err := os.WriteFile(path, []byte("v"+string(rune('2'+i%8))), 0o644); err != nil {
						t.Fatal(err)
					}
				case <-deadline:
					t.Fatal("no log record 20 s after writing the file")
				}
			}
		})
	}
}
