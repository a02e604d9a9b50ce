package dataplane

import (
	"time"

	"github.com/tern-gw/tern/dataplane/mountwatch"
	"github.com/tern-gw/tern/dataplane/secretfile"
)

// secretPollInterval is how often credential files are re-read even when
// the watch reported nothing: a watch can miss changes (inotify limits, a
// file system without events), and a rotated password that never arrives
// locks every client out. Two small reads every 30 s cost nothing.
var secretPollInterval = 30 * time.Second

// secretDebounce lets a burst of events (kubelet writes a Secret volume's
// new files, then swaps its ..data symlink) settle into one reload.
const secretDebounce = 100 * time.Millisecond

// watchSecrets re-reads the config's credential files (auth.passwordFile,
// auth.sharedSecretFile) when their directories change or every
// secretPollInterval, and applies changed credentials to the engine in
// place: a rotated password in a mounted Secret reaches ternd without a
// restart, and allocations made with the old one stay until they expire
// or their client refreshes with the new one. The ConfigMap does not
// change on a rotation (it names the file only), so nothing else would
// notice. It stops when the server closes, and never waits for the
// server's lock while the server waits for it: Close does not wait for it,
// and reloadSecrets gives up once the server is closed.
func (s *Server) watchSecrets(files []string) *mountwatch.Dirs {
	return mountwatch.WatchDirs(s.stop, files, secretPollInterval, secretDebounce, s.log, "credential", s.reloadSecrets)
}

// reloadSecrets reads the credential files of the config in force and, if
// the credentials differ from the engine's, applies them. A file that
// cannot be read, or is empty, keeps the credentials in use: a Secret
// caught mid-update, or deleted by mistake, must not lock every client out
// or let anyone in.
func (s *Server) reloadSecrets() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(secretfile.Files(s.cfg.Auth)) == 0 {
		return
	}
	settings, err := s.settingsFor(s.cfg)
	if err != nil {
		s.log.Error("credential file unreadable; the credentials in use stay", "error", err)
		return
	}
	if settings.Auth == s.auth {
		return
	}
	if err := s.engine.Reconfigure(settings); err != nil {
		s.log.Error("applying new credentials", "error", err)
		return
	}
	s.auth = settings.Auth
	// The credentials themselves are never logged.
	s.log.Info("credentials reloaded from their files", "files", secretfile.Files(s.cfg.Auth))
}
