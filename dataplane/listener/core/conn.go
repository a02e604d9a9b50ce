package core

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/admission"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// Base is what TCP, TLS and DTLS listeners share: the listener config, its
// allowlist, its connections, their limits and counters. A transport's
// listener embeds it and gets Spec, SetSpec, SetAllowlist, SetConnLimits,
// KeyPair, FoldStats and ConnStats from it.
type Base struct {
	Env Env
	// Cert and Key are the PEM pair a TLS or DTLS listener started with.
	Cert, Key []byte
	// Closed is set when the listener starts closing.
	Closed atomic.Bool

	cfg       atomic.Pointer[config.Listener]
	proto     turn.Proto
	allowlist atomic.Pointer[allowlist.List]
	limits    atomic.Pointer[ConnLimits]
	admission *admission.Set[*Conn]

	mu    sync.Mutex
	conns map[*Conn]struct{} // every connection whose goroutine runs
	// gone holds the counters of closed connections (Conn.Stats).
	gone stats.Sum
	shut bool // no connection joins conns any more
	wg   sync.WaitGroup

	idleCount  atomic.Uint64
	frameCount atomic.Uint64
}

// Init sets up b for listener lc with transport proto and allowlist al.
func (b *Base) Init(env Env, lc config.Listener, proto turn.Proto, al *allowlist.List) {
	b.Env, b.proto, b.conns = env, proto, map[*Conn]struct{}{}
	b.admission = admission.New(func(c *Conn) bool { return env.Engine.Lookup(c.FT) != nil })
	b.cfg.Store(&lc)
	b.allowlist.Store(al)
	lim := env.Conns
	b.limits.Store(&lim)
}

func (b *Base) Spec() config.Listener           { return *b.cfg.Load() }
func (b *Base) SetSpec(lc config.Listener)      { b.cfg.Store(&lc) }
func (b *Base) SetAllowlist(al *allowlist.List) { b.allowlist.Store(al) }
func (b *Base) SetConnLimits(lim ConnLimits)    { b.limits.Store(&lim) }
func (b *Base) KeyPair() (cert, key []byte)     { return b.Cert, b.Key }

// FoldStats adds the counters of the listener's open and closed
// connections to sum.
func (b *Base) FoldStats(sum *stats.Sum) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sum.Add(&b.gone)
	for c := range b.conns {
		c.Stats.AddTo(sum)
	}
}

// ConnStats returns the listener's connection counts.
func (b *Base) ConnStats() (ConnStats, bool) {
	b.mu.Lock()
	n := len(b.conns)
	b.mu.Unlock()
	a := b.admission.Counts()
	return ConnStats{Active: n, Accepted: a.Accepted, RefusedPerIP: a.RefusedPerIP,
		RefusedTotal: a.RefusedTotal, Shed: a.Shed, Idle: b.idleCount.Load(), Frame: b.frameCount.Load()}, true
}

func (b *Base) admissionLimits() admission.Limits {
	lim := b.limits.Load()
	return admission.Limits{PerIP: lim.PerIP, Max: lim.Max}
}

// Admit registers a new connection under the listener's limits (package
// admission), and on admission closes the connection it pushed out
// (Conn.Abort). With countIP the connection takes its client address's
// share at once (TCP and TLS after their handshake, DTLS when the client
// returns its cookie). An admitted connection's reader must end with
// Finish.
func (b *Base) Admit(c *Conn, countIP bool) admission.Decision {
	d, victim := b.admission.Admit(c.entry, b.admissionLimits(), countIP)
	if d != admission.Admitted {
		return d
	}
	b.mu.Lock()
	if b.shut {
		b.mu.Unlock()
		b.admission.Remove(c.entry)
		return admission.Closing
	}
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	b.mu.Unlock()
	if victim != nil {
		victim.Conn.Abort()
	}
	return admission.Admitted
}

// remove forgets a connection whose goroutines have ended, keeping its
// counters in b.gone.
func (b *Base) remove(c *Conn) {
	b.admission.Remove(c.entry)
	b.mu.Lock()
	delete(b.conns, c)
	c.Stats.AddTo(&b.gone)
	b.mu.Unlock()
	b.wg.Done()
}

// CloseAll closes every connection and waits for their goroutines, which
// delete the connections' allocations. The connections are closed with no
// lock held: closing a DTLS association takes its handling lock, which the
// listener's reader holds while it calls into the listener (Handle).
func (b *Base) CloseAll() {
	b.Closed.Store(true)
	b.admission.Close()
	b.mu.Lock()
	b.shut = true
	conns := make([]*Conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.C.Close()
	}
	b.wg.Wait()
}

// RelayWriter writes what relay workers deliver to a connection's client
// without blocking; dropped means the client is too slow and the message
// was given up (UDP-like loss).
type RelayWriter interface {
	WriteRelayed(msg []byte) (dropped bool, err error)
}

// Conn is one client connection: the turn.Transport and relay.Client of
// the allocations made over it, and the Sink of its replies and forwards.
// Its reader goroutine runs the engine and writes the replies; relay
// workers write what peers send themselves, on their own goroutines,
// through Relay (which never blocks).
type Conn struct {
	b *Base
	// C is the accepted connection, closed to end the reader.
	C net.Conn
	// W is what replies go to: C, or the TLS or DTLS session over it.
	W net.Conn
	// Relay takes what relay workers deliver; nil writes it to W.
	Relay RelayWriter
	// Raw is the socket under any session (TCP, TLS), closed at once when
	// a write fails or the connection is shed; nil closes C.
	Raw *net.TCPConn
	// Sock, when set, is closed (or aborted) instead of Raw: the socket
	// under a TURN-TLS session, which leaves Raw for an event loop once
	// the handshake is done (package stream).
	Sock RawSocket
	// FT is the connection's 5-tuple.
	FT turn.FiveTuple
	// Quit is closed when the connection ends.
	Quit chan struct{}
	// allocated is whether the engine held an allocation on FT when a
	// reader last looked: the connection's goroutine, and on DTLS also the
	// listener's reader, which handles application data itself.
	allocated atomic.Bool
	// Stats are the connection's own counters, written by its reader and
	// the relay workers, so that connections share no counter.
	Stats stats.Worker
	entry *admission.Entry[*Conn]

	// Out, when set, takes what relay workers queue for the client instead
	// of the connection's own queue (a DTLS association whose record layer
	// has taken over: its records leave with its listener's other
	// associations' in one sendmmsg). Set before the connection's first
	// allocation exists.
	Out Outbox
	// qmu guards q, the messages relay workers queued for a TCP or TLS
	// client since the last flush, back to back, and qn, their number.
	qmu sync.Mutex
	q   []byte
	qn  int
}

// Outbox is where relay workers queue messages for connection clients
// whose transport batches them across clients (DTLS: per relay worker and
// listener socket). It has relay.Client's QueueToClient and FlushToClient
// contract, with c the connection queued for.
type Outbox interface {
	Queue(w int, c *Conn, msg []byte) bool
	Flush(w int)
}

// Limits of a connection's relayed-message queue (Conn.QueueToClient).
const (
	// queueFlushAt is how many bytes may be queued before a relay worker
	// writes them at once rather than at the end of its wake-up: about
	// one TLS record's worth (16 KiB of plaintext).
	queueFlushAt = 16 << 10
	// queueKeep is the largest queue buffer a connection keeps between
	// flushes; a larger one (after a burst) goes back to the heap.
	queueKeep = 64 << 10
)

// QueueToClient implements relay.Client: msg is appended to the
// connection's queue, which FlushToClient writes with one write (TCP) or
// in one TLS record holding every message (TURN-TLS framing is the byte
// stream's: record boundaries carry no meaning, RFC 8656 §3.1). A
// connection whose transport batches across clients (Out) queues there.
// It reports true when the queue was empty, so that worker w flushes it.
func (c *Conn) QueueToClient(w int, msg []byte) bool {
	if c.Out != nil {
		return c.Out.Queue(w, c, msg)
	}
	c.qmu.Lock()
	first := len(c.q) == 0
	if len(c.q)+len(msg) > queueFlushAt && !first {
		c.flushLocked()
		first = false // this worker's flush is still owed for msg
	}
	c.q = append(c.q, msg...)
	c.qn++
	c.qmu.Unlock()
	return first
}

// FlushToClient implements relay.Client: it writes what the relay workers
// queued (QueueToClient) as one message would be written by WriteToClient,
// dropping all of it when a TCP or TLS client is too slow.
func (c *Conn) FlushToClient(w int) {
	if c.Out != nil {
		c.Out.Flush(w)
		return
	}
	c.qmu.Lock()
	c.flushLocked()
	c.qmu.Unlock()
}

// flushLocked writes c.q; the caller holds c.qmu.
func (c *Conn) flushLocked() {
	if len(c.q) == 0 {
		return
	}
	c.write(c.q, uint64(c.qn))
	if cap(c.q) > queueKeep {
		c.q = nil
	} else {
		c.q = c.q[:0]
	}
	c.qn = 0
}

// NewConn returns the connection c accepted by b.
func (b *Base) NewConn(c net.Conn) *Conn {
	remote := AddrPortOf(c.RemoteAddr())
	local := AddrPortOf(c.LocalAddr())
	cc := &Conn{b: b, C: c, W: c, FT: turn.FiveTuple{Client: remote, Server: local, Proto: b.proto},
		Quit: make(chan struct{})}
	cc.entry = admission.NewEntry(cc, remote.Addr())
	return cc
}

// AddrPortOf is the address and port of a TCP or UDP address, IPv4
// unmapped.
func AddrPortOf(a net.Addr) netip.AddrPort {
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
func (c *Conn) PeerCluster(p netip.AddrPort) (uint32, bool) {
	return c.b.allowlist.Load().Cluster(p)
}

// BatchSocket implements relay.Client: a connection takes WriteToClient.
func (c *Conn) BatchSocket(int) (int, *stats.Worker, bool) { return -1, nil, false }

// WriteToClient implements relay.Client: it writes msg to the client on
// the caller's goroutine without blocking. When a TCP or TLS client is too
// slow to keep up, the message is dropped and counted, UDP-like; a
// connection whose write fails is closed.
func (c *Conn) WriteToClient(msg []byte) { c.write(msg, 1) }

// write writes b, n relayed messages back to back, as WriteToClient
// writes one.
func (c *Conn) write(msg []byte, n uint64) {
	var dropped bool
	var err error
	if c.Relay != nil {
		dropped, err = c.Relay.WriteRelayed(msg)
	} else {
		_, err = c.W.Write(msg)
	}
	switch {
	case err != nil:
		c.closeRaw() // a stalled or gone client: the reader ends too
	case dropped:
		c.Stats.Drops[turn.DropUnexpected].Add(n)
	case !c.b.Env.NoCounters:
		c.Stats.Tx.Add(n)
		c.Stats.TxBytes.Add(uint64(len(msg)))
	}
}

// CountTx counts one message of size bytes sent to the client (an
// Outbox counts what it queued).
func (c *Conn) CountTx(size int) {
	if !c.b.Env.NoCounters {
		c.Stats.Tx.Add(1)
		c.Stats.TxBytes.Add(uint64(size))
	}
}

// closeRaw closes the connection's socket without a TLS close_notify or
// DTLS alert, which could not be delivered anyway.
func (c *Conn) closeRaw() {
	if c.Sock != nil {
		c.Sock.Close()
		return
	}
	if c.Raw != nil {
		c.Raw.Close()
		return
	}
	c.C.Close()
}

// RawSocket is a connection's socket under its session: Close closes it
// without a TLS close_notify, Abort with a reset (SO_LINGER 0).
type RawSocket interface {
	Close() error
	Abort()
}

// aborter is a connection that closes itself with a reset.
type aborter interface{ Abort() }

// Abort closes the connection at once: a TCP or TLS one with a reset and
// without close_notify, so that refusing or shedding it leaves no
// TIME_WAIT state behind in the kernel.
func (c *Conn) Abort() {
	if c.Sock != nil {
		c.Sock.Abort()
		return
	}
	if c.Raw != nil {
		_ = c.Raw.SetLinger(0)
		c.Raw.Close()
		return
	}
	if a, ok := c.C.(aborter); ok {
		a.Abort() // a raw socket of the stream event loops
		return
	}
	c.C.Close()
}

// Reply implements Sink for the connection's reader: only requests
// (Allocate, Refresh) make or end an allocation, and each gets a reply, so
// it looks at the allocation here, not per packet, then writes msg without
// blocking (see WriteToClient).
func (c *Conn) Reply(msg []byte, _ netip.AddrPort) error {
	c.CheckAllocation()
	_, err := c.W.Write(msg)
	return err
}

// Forward implements Sink: one datagram from the relay socket, now.
func (c *Conn) Forward(fd int, p []byte, peer netip.AddrPort) error {
	return udpio.SendTo(fd, p, peer)
}

// Handle runs the engine on one message from the client and delivers the
// result through sink (c itself, or the DTLS reader's batching sink). It
// reports false when a reply could not be written (the connection is then
// to be closed).
func (c *Conn) Handle(msg []byte, res *turn.Result, sink Sink) bool {
	var n Counts
	n.Received(len(msg))
	c.b.Env.Engine.HandleClient(c, c.FT, msg, res)
	err := Deliver(res, c.FT.Client, sink, &c.Stats, &n)
	n.Flush(&c.Stats, c.b.Env.NoCounters)
	return err == nil
}

// CheckAllocation asks the engine whether the connection holds an
// allocation and, when that changed, moves it on or off the shed list.
func (c *Conn) CheckAllocation() {
	if has := c.b.Env.Engine.Lookup(c.FT) != nil; c.allocated.Swap(has) != has {
		c.b.admission.SetAllocated(c.entry, has)
	}
}

// IdleLimit is how long the connection may now stay silent.
func (c *Conn) IdleLimit() time.Duration {
	lim := c.b.limits.Load()
	if c.allocated.Load() {
		return lim.AllocatedIdleTimeout
	}
	return lim.IdleTimeout
}

// PartialFrameLimit is how long the connection may take to send the rest
// of a frame it has begun.
func (c *Conn) PartialFrameLimit() time.Duration {
	if d := c.b.limits.Load().PartialFrameTimeout; d > 0 {
		return d
	}
	return time.Duration(config.DefaultPartialFrameTimeout) * time.Second
}

// FrameClosed counts a connection closed for a frame it did not complete
// in time (PartialFrameLimit), or whose buffer was over budget.
func (c *Conn) FrameClosed() { c.b.frameCount.Add(1) }

// Expired decides, at a read timeout, whether the connection has been
// silent too long: it has, unless it holds an allocation (made, say, just
// after the reader last looked) and has been silent for less than the
// allocated limit. It counts the connections it condemns.
func (c *Conn) Expired(last time.Time) bool {
	c.CheckAllocation()
	if c.allocated.Load() && time.Since(last) < c.b.limits.Load().AllocatedIdleTimeout {
		return false
	}
	c.b.idleCount.Add(1)
	return true
}

// Finish closes the connection, deletes its allocations and forgets it.
func (c *Conn) Finish() {
	close(c.Quit)
	if c.W != c.C {
		c.W.Close()
	}
	c.C.Close()
	if n := c.b.Env.Engine.CloseTransport(c, "connection closed"); n > 0 {
		c.b.Env.Log.Debug("connection closed", "client", c.FT.String(), "allocations", n)
	}
	c.b.remove(c)
}
