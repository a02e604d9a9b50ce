package stream

import (
	"crypto/tls"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/dataplane/listener/stream/tlsrecord"
)

// tlsSession is a TURN-TLS connection's session: crypto/tls for the
// handshake and, when it negotiated TLS 1.3, Tern's own record layer
// after it (tlsrecord.Session over the tlsSocket), which opens records in
// place in a pooled buffer and seals into one it keeps, with no heap
// allocation per message either way; crypto/tls's Read allocates a reader
// each time it reads its socket, once per message on a loop's wake-up. A
// TLS 1.2 session stays with crypto/tls. The handshake runs over a
// tlsrecord.RecordConn, which leaves in the socket whatever the client
// sent after its Finished, so the records taken over start there; and its
// config has session tickets off, so that no record of the server's has
// used the application keys before Tern's first.
//
// mu orders the switch against Close: a session closed during its
// handshake stays with crypto/tls, whose Close then ends it. It is a leaf
// (tlsrecord.Session's write lock is taken after it is released).
type tlsSession struct {
	*tls.Conn                       // the handshake, and a TLS 1.2 session
	hs        *tlsrecord.RecordConn // under the handshake
	secrets   *tlsrecord.Secrets
	sock      *tlsSocket

	mu     sync.Mutex
	closed bool
	own    atomic.Pointer[tlsrecord.Session] // set by Handshake for TLS 1.3
}

// newTLSSession returns the session of a connection over s, with the
// handshake's config conf: a copy of it logs the connection's secrets
// (to secrets) and sends no session tickets.
func newTLSSession(s *tlsSocket, conf *tls.Config) *tlsSession {
	ts := &tlsSession{hs: tlsrecord.NewRecordConn(s), secrets: &tlsrecord.Secrets{}, sock: s}
	c := conf.Clone()
	c.KeyLogWriter = ts.secrets
	c.SessionTicketsDisabled = true
	ts.Conn = tls.Server(ts.hs, c)
	return ts
}

// Handshake runs crypto/tls's handshake and, for TLS 1.3, takes the
// session's records over (see tlsSession). A session it cannot take over
// stays with crypto/tls; that is not an error.
func (ts *tlsSession) Handshake() error {
	if err := ts.Conn.Handshake(); err != nil {
		return err
	}
	drained := ts.hs.Finish()
	st := ts.Conn.ConnectionState()
	client, server, ok := ts.secrets.Traffic()
	if !drained || !ok || st.Version != tls.VersionTLS13 {
		return nil
	}
	rec, err := tlsrecord.New(st.CipherSuite, client, server, true)
	if err != nil {
		return nil
	}
	ts.mu.Lock()
	if !ts.closed {
		ts.own.Store(tlsrecord.NewSession(ts.sock, rec))
	}
	ts.mu.Unlock()
	return nil
}

// Own reports whether the session's records are Tern's.
func (ts *tlsSession) Own() bool { return ts.own.Load() != nil }

// Read returns application data; with Tern's records see
// tlsrecord.Session.Read (errWouldBlock from a loop's socket passes
// through, and the part of a record read so far waits for the next Read).
func (ts *tlsSession) Read(b []byte) (int, error) {
	if s := ts.own.Load(); s != nil {
		return s.Read(b)
	}
	return ts.Conn.Read(b)
}

// Write seals b and writes it with one write (tlsrecord.Session.Write, or
// tls.Conn's).
func (ts *tlsSession) Write(b []byte) (int, error) {
	if s := ts.own.Load(); s != nil {
		return s.Write(b)
	}
	return ts.Conn.Write(b)
}

// Close sends a close_notify and closes the socket.
func (ts *tlsSession) Close() error {
	ts.mu.Lock()
	ts.closed = true
	s := ts.own.Load()
	ts.mu.Unlock()
	if s == nil {
		return ts.Conn.Close()
	}
	return errors.Join(s.CloseNotify(), ts.sock.Close())
}
