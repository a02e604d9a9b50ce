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
// SetFiles reloads, and a directory no longer named stops counting.
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

	// a is no longer watched: a write there adds nothing (the poll is an
	// hour away).
	n := reloads.Load()
	write(a)
	time.Sleep(300 * time.Millisecond)
	if got := reloads.Load(); got != n {
		t.Fatalf("%d reloads after a write to an unwatched directory, want %d", got, n)
	}
}
