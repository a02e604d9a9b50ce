package mountwatch

import (
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Dirs watches the directories of a set of files, which may change
// (SetFiles), and calls reload as Loop does: debounce after the last event
// of a burst, and every poll. It watches directories, not the files:
// kubelet swaps a Secret volume's ..data symlink and editors replace files
// by rename, and a watch on the file itself would see neither. What cannot
// be watched (no inotify, a missing directory) is only polled, with a
// warning on log naming what.
//
// mu guards dirs; reload is never called under it.
type Dirs struct {
	log  *slog.Logger
	what string            // what the files are, for log lines
	poll time.Duration     // for log lines
	w    *fsnotify.Watcher // nil when no watch could be set: polling only
	mu   sync.Mutex
	dirs map[string]bool
}

// WatchDirs starts following the directories of files (none is fine: then
// it only polls until SetFiles names some) and returns at once; the watch
// runs until stop is closed. what names the files in log lines (e.g.
// "credential").
func WatchDirs(stop <-chan struct{}, files []string, poll, debounce time.Duration, log *slog.Logger, what string, reload func()) *Dirs {
	d := &Dirs{log: log, what: what, poll: poll, dirs: map[string]bool{}}
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("cannot watch "+what+" files, polling them", "every", poll, "error", err)
	} else {
		d.w = w
	}
	d.SetFiles(files)
	go func() {
		if d.w != nil {
			defer d.w.Close()
		}
		Loop(stop, d.w, poll, debounce, func(err error) { log.Warn(what+" file watch error", "error", err) }, reload)
	}()
	return d
}

// SetFiles makes the watch follow the directories of files from now on.
func (d *Dirs) SetFiles(files []string) {
	want := map[string]bool{}
	for _, f := range files {
		want[filepath.Dir(f)] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w != nil {
		for dir := range d.dirs {
			if !want[dir] {
				_ = d.w.Remove(dir)
			}
		}
		for dir := range want {
			if !d.dirs[dir] {
				if err := d.w.Add(dir); err != nil {
					d.log.Warn("cannot watch "+d.what+" directory, polling it", "dir", dir, "every", d.poll, "error", err)
				}
			}
		}
	}
	d.dirs = want
}
