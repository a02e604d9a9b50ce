//go:build !linux

package stream

// acceptLoop returns acceptNoLoop: event loops are implemented on Linux
// only, so every connection has a reader goroutine (serveConn).
func (l *Listener) acceptLoop() acceptResult { return acceptNoLoop }

// stopAccept does nothing: no descriptor was duplicated.
func (l *Listener) stopAccept() {}
