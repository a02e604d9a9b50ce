package dataplane

import (
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tern-gw/tern/dataplane/mountwatch"
)

// secretPollInterval is how often credential files are re-read even when
// the watch reported nothing: a watch can miss changes (inotify limits, a
// file system without events), and a rotated password that never arrives
// locks every client out. Two small reads every 30 s cost nothing.
var secretPollInterval = 30 * time.Second

// secretDebounce lets a burst of events (kubelet writes a Secret volume's
// new files, then swaps its ..data symlink) settle into one reload.
const secretDebounce = 100 * time.Millisecond

// secretWatch re-reads the config's credential files (auth.passwordFile,
// auth.sharedSecretFile) when their directories change or every
// secretPollInterval, and applies changed credentials to the engine in
// place: a rotated password in a mounted Secret reaches ternd without a
// restart, and allocations made with the old one stay until they expire
// or their client refreshes with the new one. The ConfigMap does not
// change on a rotation (it names the file only), so nothing else would
// notice.
type secretWatch struct {
	s    *Server
	log  *slog.Logger
	w    *fsnotify.Watcher // nil when no watch could be set: polling only
	mu   sync.Mutex        // guards dirs
	dirs map[string]bool
}

// watchSecrets starts the watch of files (none is fine: then it only
// waits for a config that names some). It stops when the server closes.
func (s *Server) watchSecrets(files []string) *secretWatch {
	sw := &secretWatch{s: s, log: s.log, dirs: map[string]bool{}}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("cannot watch credential files, polling them", "every", secretPollInterval, "error", err)
	} else {
		sw.w = w
	}
	sw.setFiles(files)
	go sw.run()
	return sw
}

// setFiles makes the watch follow the directories of files: kubelet swaps
// a Secret volume's ..data symlink and editors replace files by rename, so
// a watch on the file itself would see neither.
func (sw *secretWatch) setFiles(files []string) {
	want := map[string]bool{}
	for _, f := range files {
		want[filepath.Dir(f)] = true
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.w != nil {
		for d := range sw.dirs {
			if !want[d] {
				_ = sw.w.Remove(d)
			}
		}
		for d := range want {
			if !sw.dirs[d] {
				if err := sw.w.Add(d); err != nil {
					sw.log.Warn("cannot watch credential directory, polling it", "dir", d, "every", secretPollInterval, "error", err)
				}
			}
		}
	}
	sw.dirs = want
}

// run waits for changes until the server closes. It never waits for the
// server's lock while the server waits for it: Close does not wait for run
// to return, and reload gives up once the server is closed.
func (sw *secretWatch) run() {
	if sw.w != nil {
		defer sw.w.Close()
	}
	mountwatch.Loop(sw.s.stop, sw.w, secretPollInterval, secretDebounce,
		func(err error) { sw.log.Warn("credential file watch error", "error", err) },
		sw.s.reloadSecrets)
}

// reloadSecrets reads the credential files of the config in force and, if
// the credentials differ from the engine's, applies them. A file that
// cannot be read, or is empty, keeps the credentials in use: a Secret
// caught mid-update, or deleted by mistake, must not lock every client out
// or let anyone in.
func (s *Server) reloadSecrets() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.cfg.Auth.SecretFiles()) == 0 {
		return
	}
	settings, err := engineSettings(s.cfg)
	if err != nil {
		s.log.Error("credential file unreadable; the credentials in use stay", "error", err)
		return
	}
	if settings.Auth == s.auth {
		return
	}
	settings.StrictChannelNumbers = settings.StrictChannelNumbers || s.opts.StrictChannelNumbers
	if err := s.engine.Reconfigure(settings); err != nil {
		s.log.Error("applying new credentials", "error", err)
		return
	}
	s.auth = settings.Auth
	// The credentials themselves are never logged.
	s.log.Info("credentials reloaded from their files", "files", s.cfg.Auth.SecretFiles())
}
