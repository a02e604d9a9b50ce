package listener

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// Limits of connection-oriented transports (TURN-TCP, TURN-TLS, TURN-DTLS).
const (
	// handshakeTimeout bounds the TLS/DTLS handshake and the wait for the
	// first message, so an idle or stalled client does not hold a slot.
	handshakeTimeout = 10 * time.Second
	// writeTimeout bounds one write of a TCP or TLS connection's backlog
	// (outConn); a client that does not read for that long is
	// disconnected.
	writeTimeout = 5 * time.Second
	// maxStreamMessage is the largest TURN message accepted on a stream:
	// a STUN header plus the largest length field.
	maxStreamMessage = 20 + 0xFFFF
)

// connListener is what TCP, TLS and DTLS listeners share: the listener
// config, its allowlist, its connections, their limits and counters.
type connListener struct {
	cfg       atomic.Pointer[config.Listener]
	env       Env
	proto     turn.Proto
	allowlist atomic.Pointer[allowlist.List]
	limits    atomic.Pointer[ConnLimits]
	cert, key []byte

	mu    sync.Mutex
	conns map[*clientConn]struct{} // every connection whose goroutine runs
	// active is how many connections hold a slot of limits.Max: conns less
	// those shed and still closing.
	active int
	perIP  map[netip.Addr]int // slots of limits.PerIP held, by ipKey
	// shed lists the connections without an allocation, oldest first: the
	// ones a new connection may push out at limits.Max.
	shed   connList
	wg     sync.WaitGroup
	closed atomic.Bool

	// gone holds the counters of closed connections (clientConn.stats).
	gone stats.Sum // guarded by mu

	refusedPerIP, refusedTotal, shedCount, idleCount, accepted atomic.Uint64
}

func (l *connListener) init(env Env, lc config.Listener, proto turn.Proto, al *allowlist.List) {
	l.env, l.proto, l.conns, l.perIP = env, proto, map[*clientConn]struct{}{}, map[netip.Addr]int{}
	l.cfg.Store(&lc)
	l.allowlist.Store(al)
	lim := env.Conns
	l.limits.Store(&lim)
}

func (l *connListener) Spec() config.Listener           { return *l.cfg.Load() }
func (l *connListener) SetSpec(lc config.Listener)      { l.cfg.Store(&lc) }
func (l *connListener) SetAllowlist(al *allowlist.List) { l.allowlist.Store(al) }
func (l *connListener) SetConnLimits(lim ConnLimits)    { l.limits.Store(&lim) }
func (l *connListener) KeyPair() (cert, key []byte)     { return l.cert, l.key }

// FoldStats adds the counters of the listener's open and closed
// connections to sum.
func (l *connListener) FoldStats(sum *stats.Sum) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sum.Add(&l.gone)
	for c := range l.conns {
		c.stats.AddTo(sum)
	}
}

func (l *connListener) ConnStats() (ConnStats, bool) {
	l.mu.Lock()
	n := len(l.conns)
	l.mu.Unlock()
	return ConnStats{Active: n, Accepted: l.accepted.Load(), RefusedPerIP: l.refusedPerIP.Load(),
		RefusedTotal: l.refusedTotal.Load(), Shed: l.shedCount.Load(), Idle: l.idleCount.Load()}, true
}

// admission is what admit decided about a new connection.
type admission int

const (
	admitted admission = iota
	refused            // over a limit: close it and accept the next
	closing            // the listener is closing: stop accepting
)

// admit registers a new connection under the listener's limits. With
// countIP it takes a slot of the client address's share at once (TCP and
// TLS, whose handshake proved the address); DTLS takes it with claimIP
// after its handshake. At limits.Max it closes the oldest connection that
// holds no allocation to make room, or refuses c when there is none.
func (l *connListener) admit(c *clientConn, countIP bool) admission {
	lim := l.limits.Load()
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return closing
	}
	if countIP && !l.takeIPLocked(c, lim) {
		l.mu.Unlock()
		l.refusedPerIP.Add(1)
		return refused
	}
	var victim *clientConn
	if lim.Max > 0 && l.active >= lim.Max {
		if victim = l.victimLocked(); victim == nil {
			l.releaseLocked(c)
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			return refused
		}
	}
	l.conns[c] = struct{}{}
	l.active++
	c.counted = true
	l.shed.pushBack(c)
	l.wg.Add(1)
	l.mu.Unlock()
	l.accepted.Add(1)
	if victim != nil {
		l.shedCount.Add(1)
		abort(victim.c)
	}
	return admitted
}

// victimLocked picks the oldest connection without an allocation, takes it
// off the shed list and gives up its slots, so that a new connection can
// have them before the victim's goroutine has finished closing it. It
// returns nil when every connection holds an allocation.
func (l *connListener) victimLocked() *clientConn {
	for v := l.shed.head; v != nil; v = l.shed.head {
		l.shed.remove(v)
		// The shed list is updated by each connection's reader after a
		// request, so an allocation made a moment ago may not show yet.
		if l.env.Engine.Lookup(v.ft) == nil {
			l.releaseLocked(v)
			return v
		}
	}
	return nil
}

// claimIP takes a slot of the client address's share for a connection
// admitted without one (DTLS, once its handshake is done). It reports
// false when the share is used up, or when c was shed meanwhile.
func (l *connListener) claimIP(c *clientConn) bool {
	lim := l.limits.Load()
	l.mu.Lock()
	defer l.mu.Unlock()
	return c.counted && l.takeIPLocked(c, lim)
}

func (l *connListener) takeIPLocked(c *clientConn, lim *ConnLimits) bool {
	k := ipKey(c.ft.Client.Addr())
	if lim.PerIP > 0 && l.perIP[k] >= lim.PerIP {
		return false
	}
	l.perIP[k]++
	c.countedIP = true
	return true
}

// releaseLocked gives up c's slots (total and per address), once.
func (l *connListener) releaseLocked(c *clientConn) {
	if c.countedIP {
		c.countedIP = false
		k := ipKey(c.ft.Client.Addr())
		if l.perIP[k]--; l.perIP[k] <= 0 {
			delete(l.perIP, k)
		}
	}
	if c.counted {
		c.counted = false
		l.active--
	}
	l.shed.remove(c)
}

// setAllocated moves c off the shed list when it holds an allocation and
// back (as the newest) when it no longer does.
func (l *connListener) setAllocated(c *clientConn, allocated bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case allocated:
		l.shed.remove(c)
	case c.counted && !c.listed:
		l.shed.pushBack(c)
	}
}

// remove forgets a connection whose goroutines have ended, keeping its
// counters in l.gone.
func (l *connListener) remove(c *clientConn) {
	l.mu.Lock()
	l.releaseLocked(c)
	delete(l.conns, c)
	c.stats.AddTo(&l.gone)
	l.mu.Unlock()
	l.wg.Done()
}

// closeConns closes every connection and waits for their goroutines, which
// delete the connections' allocations.
//
// The connections are closed after l.mu is released: closing a DTLS
// association takes its handling lock, which the listener's reader holds
// while it calls back into l (setAllocated), so closing under l.mu would
// deadlock with it.
func (l *connListener) closeConns() {
	l.closed.Store(true)
	l.mu.Lock()
	conns := make([]*clientConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.c.Close()
	}
	l.wg.Wait()
}

// ipKey is the address whose connections share limits.PerIP: an IPv4
// address, or an IPv6 /64, which one host can fill with addresses of its
// own as a NAT fills one IPv4 address with clients.
func ipKey(a netip.Addr) netip.Addr {
	if a.Is4() {
		return a
	}
	p, _ := a.Prefix(64)
	return p.Addr()
}

// abort closes nc at once: a TLS connection without close_notify, a TCP one
// with a reset, so that refusing or shedding it leaves no TIME_WAIT state
// behind in the kernel.
func abort(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if oc, ok := nc.(*outConn); ok {
		nc = oc.TCPConn
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	nc.Close()
}

// connList is a doubly linked list of connections through their prev and
// next fields, guarded by connListener.mu.
type connList struct{ head, tail *clientConn }

func (q *connList) pushBack(c *clientConn) {
	c.prev, c.next, c.listed = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
}

// remove takes c off the list; it is a no-op when c is not on it.
func (q *connList) remove(c *clientConn) {
	if !c.listed {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
}

// clientConn is one client connection: the turn.Transport and
// relay.Client of the allocations made over it. Its reader goroutine runs
// the engine and writes the replies; relay workers write what peers send
// themselves, on their own goroutines: through o, which never blocks, on
// TCP and TLS, and straight into the DTLS session (a UDP socket, whose
// writes do not wait for the client) on DTLS.
type clientConn struct {
	l  *connListener
	c  net.Conn // the accepted connection, closed to end the reader
	w  net.Conn // what replies and relayed messages go to: c, or the DTLS session over it
	o  *outConn // TCP and TLS: the socket's writing side, under c for TLS
	ft turn.FiveTuple
	// tls is whether w is a TLS session over o.
	tls bool
	// quit ends o's flusher.
	quit chan struct{}
	// allocated is whether the engine held an allocation on ft when a
	// reader last looked: the connection's goroutine, and on DTLS also the
	// listener's reader, which handles application data itself.
	allocated atomic.Bool
	// stats are the connection's own counters, written by its reader and
	// the relay workers, so that connections share no counter.
	stats stats.Worker

	// Guarded by l.mu.
	prev, next *clientConn // neighbours on l.shed
	listed     bool        // on l.shed
	counted    bool        // holds a slot of limits.Max
	countedIP  bool        // holds a slot of limits.PerIP
}

func newClientConn(l *connListener, c net.Conn) *clientConn {
	remote := addrPortOf(c.RemoteAddr())
	local := addrPortOf(c.LocalAddr())
	return &clientConn{l: l, c: c, w: c, ft: turn.FiveTuple{Client: remote, Server: local, Proto: l.proto},
		quit: make(chan struct{})}
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

// PeerCluster implements turn.Transport with the listener's allowlist.
func (c *clientConn) PeerCluster(p netip.AddrPort) (uint32, bool) {
	return c.l.allowlist.Load().Cluster(p)
}

// BatchSocket implements relay.Client: a connection takes WriteToClient.
func (c *clientConn) BatchSocket(int) (int, *stats.Worker, bool) { return -1, nil, false }

// WriteToClient implements relay.Client: it writes msg to the client on
// the caller's goroutine without blocking. When a TCP or TLS client is too
// slow to keep up (outBacklog bytes wait already), the message is dropped
// and counted, UDP-like; a connection whose write fails is closed.
func (c *clientConn) WriteToClient(msg []byte) {
	var dropped bool
	var err error
	switch {
	case c.o == nil: // DTLS
		_, err = c.w.Write(msg)
	case c.tls:
		// A TLS record cannot be dropped once sealed: decide before.
		if dropped = c.o.backlogged(len(msg)); !dropped {
			_, err = c.w.Write(msg)
		}
	default:
		dropped, err = c.o.write(msg, true)
	}
	switch {
	case err != nil:
		c.closeRaw() // a stalled or gone client: the reader ends too
	case dropped:
		c.stats.Drops[turn.DropUnexpected].Add(1)
	case !c.l.env.NoCounters:
		c.stats.Tx.Add(1)
		c.stats.TxBytes.Add(uint64(len(msg)))
	}
}

// closeRaw closes the connection's socket without a TLS close_notify or
// DTLS alert, which could not be delivered anyway.
func (c *clientConn) closeRaw() {
	if c.o != nil {
		c.o.TCPConn.Close()
		return
	}
	c.c.Close()
}

// handle runs the engine on one message from the client. It reports false
// when a reply could not be written (the connection is then closed).
func (c *clientConn) handle(msg []byte, res *turn.Result) bool {
	st, count := &c.stats, !c.l.env.NoCounters
	if count {
		st.Rx.Add(1)
		st.RxBytes.Add(uint64(len(msg)))
	}
	c.l.env.Engine.HandleClient(c, c.ft, msg, res)
	switch res.Kind {
	case turn.Reply:
		// Only requests (Allocate, Refresh) make or end an allocation, and
		// each gets a reply: look again here, not per packet.
		c.checkAllocation()
		// The reader writes its replies itself, without blocking (see
		// WriteToClient).
		if _, err := c.w.Write(res.Reply); err != nil {
			return false
		}
		if count {
			st.Tx.Add(1)
			st.TxBytes.Add(uint64(len(res.Reply)))
		}
	case turn.Forward:
		sendForward(st, res, count)
	default:
		st.Drops[res.Drop].Add(1)
	}
	return true
}

// checkAllocation asks the engine whether the connection holds an
// allocation and, when that changed, moves it on or off the shed list.
func (c *clientConn) checkAllocation() {
	if has := c.l.env.Engine.Lookup(c.ft) != nil; c.allocated.Swap(has) != has {
		c.l.setAllocated(c, has)
	}
}

// idleLimit is how long the connection may now stay silent.
func (c *clientConn) idleLimit() time.Duration {
	lim := c.l.limits.Load()
	if c.allocated.Load() {
		return lim.AllocatedIdleTimeout
	}
	return lim.IdleTimeout
}

// expired decides, at a read timeout, whether the connection has been
// silent too long: it has, unless it holds an allocation (made, say, just
// after the reader last looked) and has been silent for less than the
// allocated limit. It counts the connections it condemns.
func (c *clientConn) expired(last time.Time) bool {
	c.checkAllocation()
	if c.allocated.Load() && time.Since(last) < c.l.limits.Load().AllocatedIdleTimeout {
		return false
	}
	c.l.idleCount.Add(1)
	return true
}

// isTimeout reports whether err is a read deadline passing, after which the
// connection may still be read.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
