package stream

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/listener/tlshello"
)

const (
	// upstreamDialTimeout bounds the TCP connect to the upstream.
	upstreamDialTimeout = 5 * time.Second
	// spliceLinger is how long a spliced connection's other direction may
	// carry on once one direction has ended (a TCP half-close), before
	// both sockets are closed.
	spliceLinger = 30 * time.Second
)

// helloConn is the connection under a TURN-TLS session whose ClientHello
// the listener read first: Read returns those bytes (pre) before the
// socket's. pre is set and read on the connection's own goroutine only.
type helloConn struct {
	*outConn
	pre []byte
}

// Read implements net.Conn.
func (h *helloConn) Read(b []byte) (int, error) {
	if len(h.pre) > 0 {
		n := copy(b, h.pre)
		h.pre = h.pre[n:]
		return n, nil
	}
	return h.outConn.Read(b)
}

// route reads c's ClientHello within up's deadline and reports whether c
// is TURN-TLS, its hello left in hc for the TLS server. A connection for
// the upstream is spliced to it here, and one whose ClientHello is slow,
// cut short, too large or malformed is closed without reaching either:
// route then returns false, once the connection is done.
func (l *Listener) route(c *core.Conn, up *config.TLSUpstream, hc *helloConn) bool {
	timeout := time.Duration(up.ClientHelloTimeout) * time.Second
	if timeout <= 0 {
		timeout = config.DefaultClientHelloTimeout * time.Second
	}
	_ = c.Raw.SetReadDeadline(time.Now().Add(timeout))
	h, raw, err := tlshello.Read(c.Raw)
	if err != nil {
		l.badHello.Add(1)
		l.Env.Log.Debug("closing connection: no ClientHello", "client", c.FT.String(), "bytes", len(raw), "error", err)
		return false
	}
	if h.IsTURN(up.TURNServerNames) {
		l.routedTURN.Add(1)
		hc.pre = raw
		return true
	}
	l.routedUpstream.Add(1)
	l.splice(c, up.Address, raw)
	return false
}

// splice connects to the upstream at addr, writes it hello (the bytes
// read from the client so far) and then copies bytes both ways until both
// directions end (on Linux, io.Copy between TCP sockets is splice(2)).
// When one direction ends its end is passed on as a half-close; the other
// may carry on for spliceLinger.
func (l *Listener) splice(c *core.Conn, addr string, hello []byte) {
	uc, err := net.DialTimeout("tcp", addr, upstreamDialTimeout)
	if err != nil {
		l.unreachable.Add(1)
		l.Env.Log.Warn("upstream unreachable", "listener", l.Spec().Name, "upstream", addr, "error", err)
		return
	}
	up := uc.(*net.TCPConn)
	defer up.Close()
	client := c.Raw
	_ = client.SetReadDeadline(time.Time{})
	if _, err := up.Write(hello); err != nil {
		return
	}
	done := make(chan error, 2)
	pipe := func(dst, src *net.TCPConn) {
		_, err := io.Copy(dst, src)
		_ = dst.CloseWrite()
		done <- err
	}
	go pipe(up, client)
	go pipe(client, up)
	err = <-done
	if err != nil && !errors.Is(err, net.ErrClosed) {
		l.Env.Log.Debug("spliced connection", "client", c.FT.String(), "error", err)
	}
	t := time.NewTimer(spliceLinger)
	defer t.Stop()
	if !errors.Is(err, net.ErrClosed) { // not closed by the listener (shed, Close)
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
	// Closed by the listener, or the other direction outstayed
	// spliceLinger: close both sockets and wait for its goroutine.
	client.Close()
	up.Close()
	<-done
}
