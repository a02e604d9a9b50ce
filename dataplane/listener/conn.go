package listener

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
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
	cfg       atomic.Pointer[config.Listener]
	env       Env
	proto     turn.Proto
	allowlist atomic.Pointer[allowlist.List]
	cert, key []byte
	stats     stats.Worker // shared by the listener's connections

	mu     sync.Mutex
	conns  map[*clientConn]struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
}

func (l *connListener) init(env Env, lc config.Listener, proto turn.Proto, al *allowlist.List) {
	l.env, l.proto, l.conns = env, proto, map[*clientConn]struct{}{}
	l.cfg.Store(&lc)
	l.allowlist.Store(al)
}

func (l *connListener) Spec() config.Listener           { return *l.cfg.Load() }
func (l *connListener) SetSpec(lc config.Listener)      { l.cfg.Store(&lc) }
func (l *connListener) SetAllowlist(al *allowlist.List) { l.allowlist.Store(al) }
func (l *connListener) KeyPair() (cert, key []byte)     { return l.cert, l.key }
func (l *connListener) FoldStats(sum *stats.Sum)        { l.stats.AddTo(sum) }

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

// clientConn is one client connection: the turn.Transport and
// relay.Client of the allocations made over it. Its reader goroutine runs
// the engine; its writer goroutine is the only one writing to the
// connection.
type clientConn struct {
	l   *connListener
	c   net.Conn // the accepted connection, closed to end both goroutines
	w   net.Conn // what the writer writes to: c, or the DTLS session over it
	ft  turn.FiveTuple
	out chan *[]byte // pooled buffers, back to bufPool once written
	// quit ends the writer.
	quit chan struct{}
}

// bufPool holds the buffers messages wait in for a connection's writer.
// They travel as *[]byte, the pointer the pool hands out, so that queueing
// and recycling one allocates nothing (putting back a fresh &slice would
// allocate its header on every message).
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1500); return &b }}

func newClientConn(l *connListener, c net.Conn) *clientConn {
	remote := addrPortOf(c.RemoteAddr())
	local := addrPortOf(c.LocalAddr())
	return &clientConn{l: l, c: c, w: c, ft: turn.FiveTuple{Client: remote, Server: local, Proto: l.proto},
		out: make(chan *[]byte, outQueue), quit: make(chan struct{})}
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
func (c *clientConn) PeerAllowed(p netip.AddrPort) bool { return c.l.allowlist.Load().Allowed(p) }

// BatchSocket implements relay.Client: a connection takes WriteToClient.
func (c *clientConn) BatchSocket(int) (int, *stats.Worker, bool) { return -1, nil, false }

// WriteToClient implements relay.Client: it queues a copy of msg for the
// writer; when the client is too slow to keep up, the message is dropped
// (and counted) rather than blocking the relay worker.
func (c *clientConn) WriteToClient(msg []byte) { c.queue(msg) }

// queue copies b into a pooled buffer for the writer, or drops it when the
// writer's queue is full.
func (c *clientConn) queue(b []byte) {
	bp := bufPool.Get().(*[]byte)
	*bp = append((*bp)[:0], b...)
	select {
	case c.out <- bp:
	default:
		bufPool.Put(bp)
		c.l.stats.Drops[turn.DropUnexpected].Add(1)
	}
}

// writer sends queued messages until quit.
func (c *clientConn) writer() {
	for {
		select {
		case <-c.quit:
			return
		case bp := <-c.out:
			_ = c.w.SetWriteDeadline(time.Now().Add(writeTimeout))
			_, err := c.w.Write(*bp)
			n := len(*bp)
			bufPool.Put(bp)
			if err != nil {
				c.c.Close() // a stalled or gone client: the reader ends too
				return
			}
			c.l.stats.Tx.Add(1)
			c.l.stats.TxBytes.Add(uint64(n))
		}
	}
}

// handle runs the engine on one message from the client.
func (c *clientConn) handle(msg []byte, res *turn.Result) {
	st := &c.l.stats
	st.Rx.Add(1)
	st.RxBytes.Add(uint64(len(msg)))
	c.l.env.Engine.HandleClient(c, c.ft, msg, res)
	switch res.Kind {
	case turn.Reply:
		c.queue(res.Reply)
	case turn.Forward:
		if udpio.SendTo(res.Alloc.Relay().Socket(), res.Payload, res.Peer) == nil {
			st.PeerTx.Add(1)
			st.PeerTxBytes.Add(uint64(len(res.Payload)))
		}
	default:
		st.Drops[res.Drop].Add(1)
	}
}

// finish closes the connection and deletes its allocations.
func (c *clientConn) finish() {
	close(c.quit)
	if c.w != c.c {
		c.w.Close()
	}
	c.c.Close()
	if n := c.l.env.Engine.CloseTransport(c, "connection closed"); n > 0 {
		c.l.env.Log.Debug("connection closed", "client", c.ft.String(), "allocations", n)
	}
	c.l.remove(c)
}
