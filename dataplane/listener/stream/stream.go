// Package stream is the TURN-TCP and TURN-TLS listener transport (RFC 8656
// §3.1 over a byte stream: STUN messages and ChannelData framed by their
// length fields). Each connection has a reader goroutine, unless the event
// loops are on (SetEventLoops, the default; Linux, loop_linux.go), which
// do for many connections per wake-up what a reader goroutine does for
// one, on raw sockets that never enter the Go netpoller (fdConn): a
// TURN-TCP connection from its accept, a TURN-TLS one once its handshake,
// run on its goroutine, is done (tlsloop_linux.go). A reader goroutine splits the
// stream into frames (frameReader), runs the engine and sends the result
// through the listener's one delivery step (core.Conn.Handle); relay
// workers queue what peers send on the connection (core.Conn.QueueToClient)
// and write all a wake-up yields for it at once through its outConn (or
// fdConn), which never blocks: one write(2) on TCP, one record on TLS.
//
// A TURN-TLS listener with an upstream (config.TLSUpstream) reads each
// connection's ClientHello first, without terminating TLS (package tlshello):
// TURN goes on to the TLS handshake with the bytes read replayed
// (helloConn), anything else is spliced to the upstream (upstream.go).
//
// Its locks: outConn.mu (fdConn.mu on an event loop) serialises a
// connection's writers (its reader's replies and relay workers' messages)
// and the flusher (the loop's backlog writes); no call out of the package
// is made under it but the socket's system calls. loop.mu guards an
// event loop's connection table and is taken under no other lock and
// with no call out of the package under it. lmu guards the listener's
// accept4 descriptor. tlsSocket.mu guards a TURN-TLS socket's move to a
// loop and is a leaf. crypto/tls's own locks (a session's writer lock)
// are taken before fdConn.mu or outConn.mu, which its Write reaches. The
// connection base (core.Base) and admission have their own; see the core
// package doc for the order across packages.
package stream

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/listener/admission"
	"github.com/tern-gw/tern/dataplane/listener/certs"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/turn"
)

// readerGoroutines is whether TURN-TCP connections accepted, and TURN-TLS
// handshakes completed, from now on get a reader goroutine each rather
// than an event loop
// (SetEventLoops); false, the zero value, is the default.
var readerGoroutines atomic.Bool

// SetEventLoops turns on or off, for the TURN-TCP connections accepted
// and the TURN-TLS handshakes completed from then on, serving them from a
// few event loops (Linux; elsewhere it changes nothing) instead of a
// reader goroutine each. On by default
// (ternd --tcp-event-loops=false turns it off): measured against reader
// goroutines on a 2-core machine (bench/PROFILE.md, "TURN-TCP on event
// loops, outside the netpoller"), the loops cost 0.7x the server CPU per
// relayed packet client -> peer and 0.8x both ways, and the same peer ->
// client (a tie over 18 alternated runs), whose path, a relay worker's
// write, they do not change.
func SetEventLoops(on bool) { readerGoroutines.Store(!on) }

// Listener is a TURN-TCP or TURN-TLS listener.
type Listener struct {
	core.Base
	ln    net.Listener
	certs *certs.Holder // TURN-TLS only
	tls   *tls.Config   // TURN-TLS only
	// lmu guards lfile, lrc and lstop: the duplicate of the listening
	// descriptor that the event loops' accept4 waits on (acceptLoop,
	// Linux), and whether the listener stopped accepting.
	lmu   sync.Mutex
	lfile *os.File
	lrc   syscall.RawConn
	lstop bool

	// routed counts connections by where their ClientHello sent them
	// (TURN-TLS with an upstream).
	routedTURN, routedUpstream, badHello, unreachable atomic.Uint64
}

// LocalAddr is the bound address, for logs.
func (l *Listener) LocalAddr() string { return l.ln.Addr().String() }

// Start opens the TURN-TCP or TURN-TLS listener lc, serving clients that
// may reach the peers of al. Its errors name the listener: a port in use,
// a certificate or key that cannot be read.
func Start(env core.Env, lc config.Listener, al *allowlist.List) (*Listener, error) {
	l := &Listener{}
	proto := turn.ProtoTCP
	var tlsConf *tls.Config
	if lc.Protocol == protocol.TURNTLS {
		h, err := certs.New(lc, env.Log)
		if err != nil {
			return nil, err
		}
		l.certs = h
		proto = turn.ProtoTLS
		l.Cert, l.Key = h.PEM()
		tlsConf = &tls.Config{GetCertificate: h.GetCertificate, MinVersion: tls.VersionTLS12}
	}
	l.Init(env, lc, proto, al)
	ln, err := net.Listen("tcp", net.JoinHostPort(lc.Address, fmt.Sprint(lc.Port)))
	if err != nil {
		if l.certs != nil {
			l.certs.Close()
		}
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	// TLS runs over the connection's outConn (see accept), not over a
	// tls.NewListener's plain connection.
	l.tls = tlsConf
	l.ln = ln
	go l.accept()
	return l, nil
}

// tlsRelay writes relayed messages into a TLS session over a tlsSocket.
type tlsRelay struct {
	s *tlsSocket
	w net.Conn
}

// WriteRelayed implements core.RelayWriter. A TLS record cannot be dropped
// once sealed: it decides before.
func (t *tlsRelay) WriteRelayed(msg []byte) (bool, error) {
	if t.s.backlogged(len(msg)) {
		return true, nil
	}
	_, err := t.w.Write(msg)
	return false, err
}

// acceptResult is what acceptLoop did.
type acceptResult int

const (
	acceptNext   acceptResult = iota // a connection was handled (or a passing error)
	acceptStop                       // the listener is closed
	acceptNoLoop                     // no event loop can run: use reader goroutines
)

func (l *Listener) accept() {
	for {
		if l.tls == nil && !readerGoroutines.Load() {
			switch l.acceptLoop() {
			case acceptNext:
				continue
			case acceptStop:
				return
			}
		}
		c, err := l.ln.Accept()
		if err != nil {
			if l.Closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: back off
			continue
		}
		tc := c.(*net.TCPConn)
		if l.tls == nil && !readerGoroutines.Load() {
			// The event loops were turned on while this goroutine waited
			// in Accept.
			switch l.adopt(tc) {
			case acceptNext:
				continue
			case acceptStop:
				return
			}
		}
		if !l.serveAccepted(tc) {
			return
		}
	}
}

// serveAccepted admits tc and starts its reader goroutine; it returns
// false when the listener is closing.
func (l *Listener) serveAccepted(tc *net.TCPConn) bool {
	cc := l.NewConn(tc)
	o, err := newOutConn(tc, cc.Quit)
	if err != nil {
		_ = tc.SetLinger(0)
		tc.Close()
		return true
	}
	cc.Raw, cc.C, cc.W, cc.Relay = tc, o, o, o
	var up *config.TLSUpstream
	var hc *helloConn
	if l.tls != nil {
		s := &tlsSocket{Conn: o, o: o}
		if up = l.Spec().Upstream; up != nil {
			// The ClientHello is read before the TLS server sees it
			// and replayed to it by hc.
			hc = &helloConn{outConn: o}
			s.Conn = hc
		}
		ts := newTLSSession(s, l.tls)
		cc.C, cc.W = ts, ts
		cc.Relay = &tlsRelay{s: s, w: ts}
		cc.Sock = s
	}
	switch l.Admit(cc, true) {
	case admission.Refused:
		cc.Abort()
		return true
	case admission.Closing:
		cc.C.Close()
		return false
	}
	_ = o.SetNoDelay(true)
	go l.serveConn(cc, up, hc)
	return true
}

// serveConn reads framed messages until the client goes away, stays idle
// past its limit or breaks the framing. With an upstream up (TURN-TLS),
// it first routes the connection by its ClientHello, read through hc.
func (l *Listener) serveConn(c *core.Conn, up *config.TLSUpstream, hc *helloConn) {
	moved := false
	defer func() {
		if !moved {
			c.Finish()
		}
	}()
	if up != nil && !l.route(c, up, hc) {
		return
	}
	if tc, ok := c.C.(*tlsSession); ok {
		_ = c.C.SetDeadline(time.Now().Add(core.HandshakeTimeout))
		if err := tc.Handshake(); err != nil {
			l.Env.Log.Debug("tls handshake failed", "client", c.FT.String(), "error", err)
			return
		}
		_ = c.C.SetWriteDeadline(time.Time{})
		// From here an event loop serves the connection, unless the
		// loops are off (tlsloop_linux.go).
		if moved = c.Sock.(*tlsSocket).toLoop(c, tc, l.Env.Log); moved {
			return
		}
	}
	f := frameReader{conn: c.C}
	defer f.release()
	var res turn.Result
	last, limit := time.Now(), core.HandshakeTimeout // the first message must come soon
	for {
		f.partialLimit = c.PartialFrameLimit()
		msg, err := f.next(last.Add(limit))
		if err != nil {
			if core.IsTimeout(err) && (time.Since(last) < limit || !c.Expired(last)) {
				limit = c.IdleLimit()
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !core.IsTimeout(err) {
				l.Env.Log.Debug("closing connection", "client", c.FT.String(), "error", err)
			}
			switch {
			case errors.Is(err, errBadFrame):
				c.Stats.Drops[turn.DropMalformed].Add(1)
			case errors.Is(err, errStalledFrame), errors.Is(err, errFrameBudget):
				c.FrameClosed()
			}
			return
		}
		last = time.Now()
		if !c.Handle(msg, &res, c) {
			return
		}
		limit = c.IdleLimit()
	}
}

// ConnStats returns the listener's connection counts (core.Base's), with
// those of its ClientHello routing.
func (l *Listener) ConnStats() (core.ConnStats, bool) {
	cs, ok := l.Base.ConnStats()
	cs.Routed = core.TLSRouted{TURN: l.routedTURN.Load(), Upstream: l.routedUpstream.Load(),
		BadHello: l.badHello.Load(), Unreachable: l.unreachable.Load()}
	cs.HasUpstream = l.tls != nil && l.Spec().Upstream != nil
	return cs, ok
}

// StopAccepting closes the listening socket and leaves the connections
// it accepted, and their allocations, as they are: a ternd that handed
// over to its successor (ternd --takeover) keeps relaying its TCP and TLS
// clients until they close, while the successor, which opens the
// listener anew, takes the new ones. Close still closes the rest.
func (l *Listener) StopAccepting() {
	l.stopAccept()
	l.ln.Close()
}

// Close stops accepting, closes every connection and deletes their
// allocations.
func (l *Listener) Close() {
	l.Closed.Store(true)
	l.stopAccept()
	l.ln.Close()
	if l.certs != nil {
		l.certs.Close()
	}
	l.CloseAll()
}
