//go:build !linux

package stream

import (
	"errors"
	"log/slog"

	"github.com/tern-gw/tern/dataplane/listener/core"
)

// errNoLoop is what a moved socket would return: none moves here.
var errNoLoop = errors.New("stream: no event loops on this platform")

// fdConn has no implementation here: without event loops a TURN-TLS
// socket never moves (toLoop), so tlsSocket's fdConn is always nil.
type fdConn struct{}

func (*fdConn) Write([]byte) (int, error) { return 0, errNoLoop }
func (*fdConn) Close() error              { return nil }
func (*fdConn) Abort()                    {}
func (*fdConn) backlogged(int) bool       { return false }

func (s *tlsSocket) readMoved(*fdConn, []byte) (int, error) { return 0, errNoLoop }

// toLoop reports false: event loops are implemented on Linux only, so the
// connection keeps its reader goroutine.
func (s *tlsSocket) toLoop(*core.Conn, *tlsSession, *slog.Logger) bool { return false }
