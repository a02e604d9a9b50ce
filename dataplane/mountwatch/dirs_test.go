package mountwatch

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestDirsFollowsSetFiles: a change in the directory of a file named by
// SetFiles reloads, and a directory no longer named is no longer watched.
func TestDirsFollowsSetFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	var reloads atomic.Int64
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	d := WatchDirs(stop, []string{filepath.Join(a, "password")}, time.Hour, 50*time.Millisecond,
		slog.New(slog.DiscardHandler), "test", func() { reloads.Add(1) })

	write := func(dir string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "password"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a)
	waitFor(t, &reloads, 1)

	d.SetFiles([]string{filepath.Join(b, "password")})
	write(b)
	waitFor(t, &reloads, 2)

	// a is no longer watched, b is: asked of the watcher itself, since a
	// write to a that reloads nothing could only be shown by waiting.
	if d.w == nil {
		t.Fatal("no inotify watch: the test needs one")
	}
	if got := d.w.WatchList(); len(got) != 1 || got[0] != b {
		t.Fatalf("watching %v, want only %s", got, b)
	}
}
