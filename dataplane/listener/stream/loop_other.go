//go:build !linux

package stream

import "net"

// acceptLoop returns acceptNoLoop: event loops are implemented on Linux
// only, so every connection has a reader goroutine (serveConn).
func (l *Listener) acceptLoop() acceptResult { return acceptNoLoop }

// stopAccept does nothing: no descriptor was duplicated.
func (l *Listener) stopAccept() {}

// adopt returns acceptNoLoop: the connection keeps its reader goroutine.
func (l *Listener) adopt(*net.TCPConn) acceptResult { return acceptNoLoop }
