package dataplane

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// Limits of connection-oriented transports (TURN-TCP, TURN-TLS, TURN-DTLS).
const (
	// handshakeTimeout bounds the TLS/DTLS handshake and the wait for the
	// first message, so an idle or stalled client does not hold a slot.
	handshakeTimeout = 10 * time.Second
	// writeTimeout bounds one write to a client; a client that does not
	// read for that long is disconnected instead of stalling relaying.
	writeTimeout = 5 * time.Second
	// outQueue is how many messages may wait for a slow client before
	// further ones are dropped (UDP-like loss, never blocking a relay worker).
	outQueue = 256
	// maxStreamMessage is the largest TURN message accepted on a stream:
	// a STUN header plus the largest length field.
	maxStreamMessage = 20 + 0xFFFF
)

// connListener is what TCP, TLS and DTLS listeners share: the listener
// config, its allowlist, its connections and counters.
type connListener struct {
	cfg       config.Listener
	srv       *Server
	proto     turn.Proto
	policy    atomic.Pointer[policy]
	cert, key []byte
	idle      time.Duration
	stats     workerStats // shared by the listener's connections

	mu     sync.Mutex
	conns  map[*clientConn]struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
}

func (l *connListener) spec() config.Listener             { return l.cfg }
func (l *connListener) setSpec(lc config.Listener)        { l.cfg = lc }
func (l *connListener) setPolicy(p *policy)               { l.policy.Store(p) }
func (l *connListener) keyPair() (cert, key []byte)       { return l.cert, l.key }
func (l *connListener) foldStats(sum *statsSum)           { l.stats.addTo(sum) }
func (l *connListener) peerAllowed(p netip.AddrPort) bool { return l.policy.Load().allowed(p) }

// add registers a connection, or reports false when the listener is closing.
func (l *connListener) add(c *clientConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return false
	}
	l.conns[c] = struct{}{}
	l.wg.Add(1)
	return true
}

func (l *connListener) remove(c *clientConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	l.wg.Done()
}

// closeConns closes every connection and waits for their goroutines, which
// delete the connections' allocations.
func (l *connListener) closeConns() {
	l.closed.Store(true)
	l.mu.Lock()
	for c := range l.conns {
		c.c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// clientConn is one client connection: the turn.Transport of the
// allocations made over it. Its reader goroutine runs the engine; its
// writer goroutine is the only one writing to the connection.
type clientConn struct {
	l   *connListener
	c   net.Conn // the accepted connection, closed to end both goroutines
	w   net.Conn // what the writer writes to: c, or the DTLS session over it
	ft  turn.FiveTuple
	out chan []byte
	// quit ends the writer.
	quit chan struct{}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1500); return &b }}

func newClientConn(l *connListener, c net.Conn) *clientConn {
	remote := addrPortOf(c.RemoteAddr())
	local := addrPortOf(c.LocalAddr())
	return &clientConn{l: l, c: c, w: c, ft: turn.FiveTuple{Client: remote, Server: local, Proto: l.proto},
		out: make(chan []byte, outQueue), quit: make(chan struct{})}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch v := a.(type) {
	case *net.TCPAddr:
		ap = v.AddrPort()
	case *net.UDPAddr:
		ap = v.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// PeerAllowed implements turn.Transport with the listener's allowlist.
func (c *clientConn) PeerAllowed(p netip.AddrPort) bool { return c.l.peerAllowed(p) }

// writeToClient queues a copy of b for the writer; when the client is too
// slow to keep up, the message is dropped rather than blocking the caller.
func (c *clientConn) writeToClient(b []byte, _ netip.AddrPort) {
	bp := bufPool.Get().(*[]byte)
	*bp = append((*bp)[:0], b...)
	select {
	case c.out <- *bp:
	default:
		bufPool.Put(bp)
		c.l.stats.drops[turn.DropUnexpected].Add(1)
	}
}

// writer sends queued messages until quit.
func (c *clientConn) writer() {
	for {
		select {
		case <-c.quit:
			return
		case b := <-c.out:
			_ = c.w.SetWriteDeadline(time.Now().Add(writeTimeout))
			_, err := c.w.Write(b)
			n := len(b)
			b = b[:0]
			bufPool.Put(&b)
			if err != nil {
				c.c.Close() // a stalled or gone client: the reader ends too
				return
			}
			c.l.stats.tx.Add(1)
			c.l.stats.txBytes.Add(uint64(n))
		}
	}
}

// handle runs the engine on one message from the client.
func (c *clientConn) handle(msg []byte, res *turn.Result) {
	st := &c.l.stats
	st.rx.Add(1)
	st.rxBytes.Add(uint64(len(msg)))
	c.l.srv.engine.HandleClient(c, c.ft, msg, res)
	switch res.Kind {
	case turn.Reply:
		select {
		case c.out <- res.Reply:
		default:
			st.drops[turn.DropUnexpected].Add(1)
		}
	case turn.Forward:
		if r := forwardRelay(res); r != nil && r.sock.send(res.Payload, res.Peer) == nil {
			st.peerTx.Add(1)
			st.peerTxBytes.Add(uint64(len(res.Payload)))
		}
	default:
		st.drops[res.Drop].Add(1)
	}
}

// finish closes the connection and deletes its allocations.
func (c *clientConn) finish() {
	close(c.quit)
	if c.w != c.c {
		c.w.Close()
	}
	c.c.Close()
	if n := c.l.srv.engine.CloseTransport(c, "connection closed"); n > 0 {
		c.l.srv.log.Debug("connection closed", "client", c.ft.String(), "allocations", n)
	}
	c.l.remove(c)
}
