// Package mountwatch follows files that kubelet mounts from a Secret or
// ConfigMap (TLS certificates, credentials) and calls back when they may have
// changed.
package mountwatch

import (
	"time"

	"github.com/fsnotify/fsnotify"
)

// Loop calls reload debounce after the last event of w (a burst of events
// gives one call) and every poll, until stop is closed. Any event counts:
// kubelet updates a mounted volume by renaming ..data_tmp to ..data, an event
// that names none of the files read. The poll covers what a watch can miss
// (a watch that could not be set up, w nil, or a closed watcher), so reload
// must be cheap when nothing changed. Errors of w go to warn. Loop returns
// when stop is closed; it does not close w.
func Loop(stop <-chan struct{}, w *fsnotify.Watcher, poll, debounce time.Duration, warn func(error), reload func()) {
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-stop:
			return
		case _, ok := <-events:
			if !ok { // the watcher is gone: polling alone from here
				events = nil
				continue
			}
			settle.Reset(debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			warn(err)
		case <-settle.C:
			reload()
		case <-ticker.C:
			reload()
		}
	}
}
