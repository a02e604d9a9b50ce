package mountwatch

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// start runs Loop on a watch of a new directory until the test ends and
// counts the reloads it calls.
func start(t *testing.T, poll, debounce time.Duration) (string, *atomic.Int64) {
	t.Helper()
	dir := t.TempDir()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	var reloads atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		Loop(stop, w, poll, debounce, func(error) {}, func() { reloads.Add(1) })
	}()
	t.Cleanup(func() {
		close(stop)
		<-done // Loop returns once stop is closed
		w.Close()
	})
	return dir, &reloads
}

// waitFor polls until reloads reaches n or 10 s pass.
func waitFor(t *testing.T, reloads *atomic.Int64, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); reloads.Load() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d reloads after 10s, want %d", reloads.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBurstOfEventsIsOneReload(t *testing.T) {
	// The debounce is long next to the burst, so a loaded machine still
	// writes all 20 files inside one window.
	dir, reloads := start(t, time.Hour, 2*time.Second)
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, reloads, 1)
	time.Sleep(3 * time.Second) // past another debounce window: nothing more comes
	if n := reloads.Load(); n != 1 {
		t.Errorf("20 writes in a burst gave %d reloads, want 1", n)
	}
}

func TestRenameIsAChange(t *testing.T) {
	// kubelet's update of a mounted volume: a rename that names no file the
	// caller reads.
	dir, reloads := start(t, time.Hour, 10*time.Millisecond)
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reloads, 1)
	before := reloads.Load()
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reloads, before+1)
}

func TestPollWithoutWatcher(t *testing.T) {
	var reloads atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		Loop(stop, nil, 10*time.Millisecond, time.Hour, func(error) { t.Error("no watcher, no errors") }, func() { reloads.Add(1) })
	}()
	waitFor(t, &reloads, 3)
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Loop did not return after stop was closed")
	}
}

func TestWatchErrorsGoToWarn(t *testing.T) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	warned := make(chan error, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		Loop(stop, w, time.Hour, time.Hour, func(err error) { warned <- err }, func() {})
	}()
	want := errors.New("queue overflow")
	go func() { w.Errors <- want }()
	select {
	case got := <-warned:
		if got != want {
			t.Errorf("warn got %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watch error did not reach warn")
	}
	close(stop)
	<-done
}
