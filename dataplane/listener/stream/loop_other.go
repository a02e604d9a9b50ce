//go:build !linux

package stream

import (
	"log/slog"

	"github.com/tern-gw/tern/dataplane/listener/core"
)

// startLoop returns false: event loops are implemented on Linux only, so
// every connection has a reader goroutine (serveConn).
func startLoop(*core.Conn, *outConn, *slog.Logger) bool { return false }
