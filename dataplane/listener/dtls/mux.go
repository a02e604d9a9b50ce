package dtls

import (
	"container/list"
	"crypto/subtle"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/listener/dtls/hello"
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// The TURN-DTLS listener's socket layer: one UDP socket, read by one
// goroutine, which finds each datagram's association by its source address
// (and makes one only for a first ClientHello, keeping it unverified until
// the client returns pion's cookie: open, verify).
// Until an association's handshake is done its datagrams queue for
// pion/dtls (through assoc, a net.Conn); after it, application data records
// are opened and handed to the engine right there (record.Records), with no
// goroutine in between, and only other records (alerts, a handshake flight
// sent again) still go to pion.

// assocQueue is how many datagrams may wait for pion/dtls on an
// association (handshake flights, alerts; application data only on the
// suites without a fast path) before more are dropped.
const assocQueue = 64

// dtlsMux owns the listener socket and its associations.
type dtlsMux struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	out   *udpio.ConnSender // sends on the socket from any goroutine
	local *net.UDPAddr
	// wild is set when the socket is bound to a wildcard address: it
	// reports each datagram's destination (udpio.SetPacketInfo), which
	// becomes the association's local address, the source of all it sends
	// and the server address of its 5-tuple.
	wild bool
	mu   sync.Mutex
	m    map[netip.AddrPort]*assoc
	// accept gets each association opened by a datagram from a new
	// address that starts a handshake.
	accept chan *assoc
	closed atomic.Bool
	// drops counts datagrams dropped because an association's queue was
	// full or no association would take them.
	drops atomic.Uint64
	// snd sends what the reader's records carry to peers, after each
	// batch; only the reader uses it.
	snd *udpio.Sends

	// unv lists the open unverified associations, oldest first; at
	// unverifiedMax a new one closes the oldest. pending counts the
	// unverified associations whose handshake goroutine has not ended
	// (open or closed), at most 2 × unverifiedMax. Both guarded by mu.
	unv     list.List
	pending int
	// admit is called by the reader when an association's client returns
	// the cookie of pion's HelloVerifyRequest: it admits the association
	// under the listener's limits (which count verified associations
	// alone) and reports whether it may go on.
	admit func(*assoc) bool
	// evicted counts unverified associations closed to make room for a
	// new one; expired, those closed at unverifiedLifetime.
	evicted, expired atomic.Uint64

	// The hand-over (handover.go): pause is set while the reader is to
	// stop; the reader says on parkedC that it has, and waits for pause
	// to be closed. gone is set once a successor serves the associations:
	// nothing more is sent on the socket (no close_notify).
	pmu     sync.Mutex
	pause   chan struct{}
	parkedC chan struct{}
	gone    atomic.Bool
}

// Unverified associations. pion/dtls answers a first ClientHello with a
// HelloVerifyRequest and keeps the handshake's state meanwhile, in the
// association and its goroutines, so until the client has returned the
// cookie (which proves its address, RFC 6347 §4.2.1) an association is
// unverified: there are at most unverifiedMax of them open, each lives at
// most unverifiedLifetime, a new one closes the oldest at the cap, and none
// counts toward the listener's connection limits. A closed one's
// goroutines take a few milliseconds to end; while 2 × unverifiedMax
// unverified associations still have theirs, a new ClientHello is dropped,
// so that a flood faster than they end cannot pile them up.
const (
	// unverifiedMax bounds the open unverified associations: each has
	// four goroutines and about 40 KiB (TestUnverifiedCost,
	// docs/security.md), so at most 2 × 256 × 4 = 2,048 goroutines and
	// about 20 MiB, open and closing together.
	unverifiedMax = 256
	// unverifiedLifetime is how long a client has to return the cookie:
	// a round trip and a retransmission or two of its ClientHello (RFC
	// 6347 §4.2.4: the first after 1 s, then 2 s).
	unverifiedLifetime = 4 * time.Second
)

func newDTLSMux(conn *net.UDPConn, backlog int) (*dtlsMux, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	out, err := udpio.NewConnSender(conn)
	if err != nil {
		return nil, err
	}
	local := conn.LocalAddr().(*net.UDPAddr)
	wild := local.IP.IsUnspecified() && setPacketInfo(rc)
	return &dtlsMux{conn: conn, rc: rc, out: out, local: local, wild: wild, m: map[netip.AddrPort]*assoc{},
		accept: make(chan *assoc, backlog), snd: udpio.NewSends(udpio.BatchSize), admit: func(*assoc) bool { return true },
		parkedC: make(chan struct{}, 1)}, nil
}

// assoc is one association: the net.Conn pion/dtls runs the handshake
// over, and, once the record layer has taken over, its keys and the
// connection that handles what it carries.
type assoc struct {
	mux    *dtlsMux
	remote netip.AddrPort
	raddr  *net.UDPAddr
	// local is the address the client sends to on a wildcard listener,
	// the source of what the association sends (the zero Addr on a
	// listener bound to one address); laddr is it with the port.
	local netip.Addr
	laddr *net.UDPAddr

	qmu      sync.Mutex
	q        []*[]byte // datagrams for pion, oldest first
	ready    chan struct{}
	deadline time.Time
	done     chan struct{}
	once     sync.Once

	// fast is set once the record layer has taken over application data;
	// hmu serialises the reader's handling with close.
	hmu    sync.Mutex
	fast   atomic.Pointer[fastAssoc]
	closed bool // guarded by hmu

	// keys gathers what the handshake shows of the record keys, until the
	// record layer takes over.
	keys record.Keys

	// verified is set by the reader when the client returned the cookie
	// (before the ClientHello carrying it goes to pion), after m.admit
	// admitted the association.
	verified atomic.Bool
	// cookie is the cookie of pion's last HelloVerifyRequest to the
	// client, seen in Write.
	cookie atomic.Pointer[[]byte]
	// expire closes the association if it is still unverified at
	// unverifiedLifetime; its own callback may stop it (Close), so it is
	// atomic.
	expire atomic.Pointer[time.Timer]
	// Guarded by mux.mu: its element of mux.unv while listed (nil
	// otherwise), and whether counted in mux.pending.
	unv     *list.Element
	pending bool
	// conn is the listener's connection of the association, set before
	// pion's handshake starts; admitted, under amu, whether m.admit
	// admitted it, and ended, whether its handshake goroutine has ended.
	conn          *core.Conn
	amu           sync.Mutex
	admitted, end bool
}

// unlist takes a off the unverified list, if it is there; under m.mu.
func (m *dtlsMux) unlist(a *assoc) {
	if a.unv != nil {
		m.unv.Remove(a.unv)
		a.unv = nil
	}
}

// fastAssoc is what the reader needs to handle an association's
// application data itself.
type fastAssoc struct {
	rec  *record.Records
	c    *core.Conn
	sink recordSink
	// last is when the last record was handled, Unix nanoseconds, for the
	// association's idle timeout.
	last atomic.Int64
	// adopted is set for an association handed over by another process:
	// it has no pion/dtls session, so the reader handles its alerts.
	adopted bool
}

var muxBufPool = sync.Pool{New: func() any { b := make([]byte, dtlsReadBuffer); return &b }}

// dispatch hands one datagram from the socket to its association, making
// an unverified one when it is a first ClientHello. b is the reader's
// buffer: what pion/dtls gets is copied, and what a record carries to a
// peer goes out by m.snd before the buffer is reused.
func (m *dtlsMux) dispatch(b []byte, from netip.AddrPort, to netip.Addr, res *turn.Result) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	m.mu.Lock()
	a := m.m[from]
	m.mu.Unlock()
	if a == nil {
		a = m.open(b, from, to)
		if a == nil {
			return
		}
	} else if !a.verified.Load() && !a.verify(b) {
		return
	}
	if f := a.fast.Load(); f != nil {
		a.handleFast(f, b, res)
		return
	}
	a.pushCopy(b)
}

// open makes an unverified association for b from an address with none,
// when b is a first ClientHello (package hello: one whole, well-formed
// ClientHello, message_seq 0 and no cookie, which is all pion/dtls takes up
// a handshake with); anything else is dropped and counted, keeping
// nothing. At unverifiedMax it closes the oldest unverified association;
// with 2 × unverifiedMax still pending it drops b.
func (m *dtlsMux) open(b []byte, from netip.AddrPort, to netip.Addr) *assoc {
	ch, err := hello.ParseClientHello(b)
	if err != nil || ch.MessageSeq != 0 || len(ch.Cookie) != 0 || m.closed.Load() {
		m.drops.Add(1)
		return nil
	}
	a := m.newAssoc(from, to)
	var oldest *assoc
	// In the map before the accept loop can see it: the loop may close it
	// at once, and Close must find it there to take it out, or the
	// address would stay tied to a closed association.
	m.mu.Lock()
	if m.unv.Len() >= unverifiedMax {
		oldest = m.unv.Front().Value.(*assoc)
		m.unlist(oldest)
	}
	full := m.pending >= 2*unverifiedMax
	if !full {
		m.m[from] = a
		a.unv = m.unv.PushBack(a)
		m.pending++
		a.pending = true
	}
	m.mu.Unlock()
	if oldest != nil {
		m.evicted.Add(1)
		oldest.Close()
	}
	if full {
		m.drops.Add(1)
		return nil
	}
	a.expire.Store(time.AfterFunc(unverifiedLifetime, func() {
		// Off the list means verified (or being verified), or closed.
		m.mu.Lock()
		listed := a.unv != nil
		m.mu.Unlock()
		if listed {
			m.expired.Add(1)
			a.Close()
		}
	}))
	select {
	case m.accept <- a:
	default:
		m.drops.Add(1)
		a.Close()
		a.ended() // it has no goroutine
		return nil
	}
	return a
}

// verify looks at datagram b for unverified association a: a ClientHello
// carrying the cookie of pion's HelloVerifyRequest (compared in constant
// time) verifies a, which m.admit then admits or refuses; a first
// ClientHello (a retransmission) goes to pion, which answers it again;
// anything else is dropped, and verify reports false.
func (a *assoc) verify(b []byte) bool {
	ch, err := hello.ParseClientHello(b)
	if err != nil {
		a.mux.drops.Add(1)
		return false
	}
	if len(ch.Cookie) == 0 {
		return true
	}
	c := a.cookie.Load()
	if c == nil || subtle.ConstantTimeCompare(*c, ch.Cookie) != 1 {
		a.mux.drops.Add(1)
		return false
	}
	m := a.mux
	m.mu.Lock()
	listed := a.unv != nil
	m.unlist(a)
	m.mu.Unlock()
	if !listed { // closed meanwhile
		return false
	}
	a.amu.Lock()
	ok := !a.end && m.admit(a)
	a.admitted = ok
	a.amu.Unlock()
	if !ok {
		a.Close() // pending until its goroutine ends
		return false
	}
	m.mu.Lock()
	if a.pending {
		a.pending = false
		m.pending--
	}
	m.mu.Unlock()
	if t := a.expire.Load(); t != nil {
		t.Stop()
	}
	a.verified.Store(true)
	return true
}

// ended tells a that its handshake goroutine is ending (pion's have
// ended), and reports whether the association was admitted (its
// connection must then be finished).
func (a *assoc) ended() bool {
	a.amu.Lock()
	a.end = true
	admitted := a.admitted
	a.amu.Unlock()
	m := a.mux
	m.mu.Lock()
	if a.pending {
		a.pending = false
		m.pending--
	}
	m.mu.Unlock()
	return admitted
}

// pushCopy queues a copy of b for pion/dtls.
func (a *assoc) pushCopy(b []byte) {
	bp := muxBufPool.Get().(*[]byte)
	*bp = append((*bp)[:0], b...)
	if !a.push(bp) {
		muxBufPool.Put(bp)
	}
}

// newAssoc makes the association of a client at from that sent to the
// address to (the zero Addr when the socket does not report it).
func (m *dtlsMux) newAssoc(from netip.AddrPort, to netip.Addr) *assoc {
	a := &assoc{mux: m, remote: from, raddr: net.UDPAddrFromAddrPort(from), laddr: m.local,
		ready: make(chan struct{}, 1), done: make(chan struct{})}
	if m.wild && to.IsValid() && to.Is4() == from.Addr().Is4() {
		a.local = to
		a.laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, uint16(m.local.Port)))
	}
	return a
}

// closeAll closes every association, once the socket is closed.
func (m *dtlsMux) closeAll() {
	m.closeAssocs()
	close(m.accept)
}

// closeAssocs closes every association; while the socket is open, those
// of the record layer send their close_notify.
func (m *dtlsMux) closeAssocs() {
	m.mu.Lock()
	as := make([]*assoc, 0, len(m.m))
	for _, a := range m.m {
		as = append(as, a)
	}
	m.mu.Unlock()
	for _, a := range as {
		a.Close()
	}
}

// close closes the socket; run then closes the associations.
func (m *dtlsMux) close() {
	m.closed.Store(true)
	m.conn.Close()
	m.pmu.Lock()
	if m.pause != nil { // a paused reader waits: let it see the close
		close(m.pause)
		m.pause = nil
	}
	m.pmu.Unlock()
}

// handleFast splits a datagram into records: application data records of
// the association's epoch are opened and handled here; the rest go to
// pion/dtls.
func (a *assoc) handleFast(f *fastAssoc, b []byte, res *turn.Result) {
	for len(b) >= record.Header {
		size := record.Header + int(binary.BigEndian.Uint16(b[11:13]))
		if size > len(b) {
			break
		}
		rec := b[:size]
		b = b[size:]
		if f.adopted && rec[0] == record.ContentAlert && binary.BigEndian.Uint16(rec[3:5]) == f.rec.Epoch() {
			// No pion session to take it: a close_notify or any other
			// alert the client seals ends the association.
			if _, ok := f.rec.Open(rec); ok {
				a.Close()
				return
			}
			f.c.Stats.Drops[turn.DropMalformed].Add(1)
			continue
		}
		if rec[0] != record.ContentAppData || binary.BigEndian.Uint16(rec[3:5]) != f.rec.Epoch() {
			if !f.adopted { // else nobody would read it: a handshake flight again
				a.pushCopy(rec)
			}
			continue
		}
		p, ok := f.rec.Open(rec)
		if !ok {
			f.c.Stats.Drops[turn.DropMalformed].Add(1)
			continue
		}
		a.hmu.Lock()
		failed := false
		if !a.closed {
			f.last.Store(time.Now().UnixNano())
			failed = !f.c.Handle(p, res, &f.sink)
		}
		a.hmu.Unlock()
		if failed {
			a.Close()
		}
	}
}

// recordSink is the core.Sink of an association's records handled by the
// listener's reader: a reply is sealed and sent at once (on the listener
// socket, which does not wait for the client), a payload for a peer joins
// snd's batch, which leaves after the reader's batch.
type recordSink struct {
	c   *core.Conn
	snd *udpio.Sends
}

func (s *recordSink) Reply(msg []byte, client netip.AddrPort) error { return s.c.Reply(msg, client) }

func (s *recordSink) Forward(fd int, p []byte, peer netip.AddrPort) error {
	s.snd.Add(fd, p, peer)
	return nil
}

// push queues a datagram for pion/dtls; it reports false, and keeps nothing,
// when the queue is full or the association closed.
func (a *assoc) push(bp *[]byte) bool {
	a.qmu.Lock()
	select {
	case <-a.done:
		a.qmu.Unlock()
		return false
	default:
	}
	if len(a.q) >= assocQueue {
		a.qmu.Unlock()
		a.mux.drops.Add(1)
		return false
	}
	a.q = append(a.q, bp)
	a.qmu.Unlock()
	select {
	case a.ready <- struct{}{}:
	default:
	}
	return true
}

// Read implements net.Conn for pion/dtls: the next datagram.
func (a *assoc) Read(p []byte) (int, error) {
	for {
		a.qmu.Lock()
		if len(a.q) > 0 {
			bp := a.q[0]
			a.q[0] = nil
			a.q = a.q[1:]
			a.qmu.Unlock()
			n := copy(p, *bp)
			muxBufPool.Put(bp)
			return n, nil
		}
		dl := a.deadline
		a.qmu.Unlock()
		var expire <-chan time.Time
		var t *time.Timer
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t = time.NewTimer(d)
			expire = t.C
		}
		var err error
		select {
		case <-a.ready: // a datagram, or a new deadline
		case <-a.done:
			err = io.EOF
		case <-expire:
			err = os.ErrDeadlineExceeded
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return 0, err
		}
	}
}

// Write implements net.Conn: one datagram to the association's address.
// It works after Close too, so that pion/dtls can still send its alert
// (the socket is the listener's, closed with it).
func (a *assoc) Write(p []byte) (int, error) {
	if a.mux.gone.Load() {
		return len(p), nil // the successor's now: it must not see our sequence numbers
	}
	if a.fast.Load() == nil {
		if !a.verified.Load() {
			if c, ok := hello.ParseHelloVerifyRequest(p); ok {
				c = append([]byte(nil), c...)
				a.cookie.Store(&c)
			}
		}
		a.keys.Observe(p)
	}
	if err := a.mux.out.SendFrom(p, a.remote, a.local); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the association: Read returns io.EOF, and the reader forgets
// the address (a new handshake from it makes a new association). Once the
// record layer has taken over, it sends the close_notify alert itself:
// pion's, sealed with pion's older sequence numbers, may fall below the
// client's replay window.
func (a *assoc) Close() error {
	a.once.Do(func() {
		if f := a.fast.Load(); f != nil && !a.mux.gone.Load() {
			if rec, err := f.rec.SealType(nil, record.ContentAlert, record.CloseNotify); err == nil {
				_, _ = a.Write(rec)
			}
		}
		a.hmu.Lock()
		a.closed = true
		a.hmu.Unlock()
		a.qmu.Lock()
		close(a.done)
		for _, bp := range a.q {
			muxBufPool.Put(bp)
		}
		a.q = nil
		a.qmu.Unlock()
		a.mux.mu.Lock()
		if a.mux.m[a.remote] == a {
			delete(a.mux.m, a.remote)
		}
		a.mux.unlist(a)
		a.mux.mu.Unlock()
		if t := a.expire.Load(); t != nil {
			t.Stop()
		}
	})
	return nil
}

func (a *assoc) LocalAddr() net.Addr  { return a.laddr }
func (a *assoc) RemoteAddr() net.Addr { return a.raddr }

func (a *assoc) SetDeadline(t time.Time) error { return a.SetReadDeadline(t) }

// SetReadDeadline applies to a Read waiting already too (pion/dtls sets a
// past deadline to end one).
func (a *assoc) SetReadDeadline(t time.Time) error {
	a.qmu.Lock()
	a.deadline = t
	a.qmu.Unlock()
	select {
	case a.ready <- struct{}{}:
	default:
	}
	return nil
}

// SetWriteDeadline is a no-op: a UDP write does not wait for the client.
func (a *assoc) SetWriteDeadline(time.Time) error { return nil }

// sealBufPool holds the buffers records are sealed into.
var sealBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1600); return &b }}

// gcmRecords derives the association's record layer from its handshake
// (record.New), or returns why it cannot.
func (a *assoc) gcmRecords() (*record.Records, error) {
	in, err := a.keys.Inputs()
	if err != nil {
		return nil, err
	}
	return record.New(in)
}

// fastConn is what an association's replies and relayed messages are
// written to once the record layer has taken over: it seals each into one
// record and sends it on the caller's goroutine.
type fastConn struct {
	net.Conn // the pion/dtls session, for Close and the addresses
	a        *assoc
	rec      *record.Records
	outs     []*outbox // the listener's, one per relay worker; nil: none
}

// Queue implements core.Outbox: relay worker wk seals msg into a record in
// its outbox, which leaves with the records of the listener's other
// associations the worker delivers to in the same wake-up.
func (w *fastConn) Queue(wk int, c *core.Conn, msg []byte) bool {
	if wk >= len(w.outs) {
		c.WriteToClient(msg)
		return false
	}
	first, err := w.outs[wk].queue(w.rec, w.a.remote, w.a.local, msg)
	if err != nil {
		c.WriteToClient(msg) // fails the same way, and closes the association
		return false
	}
	c.CountTx(len(msg))
	return first
}

// Flush implements core.Outbox: worker wk's records leave.
func (w *fastConn) Flush(wk int) {
	if wk < len(w.outs) {
		w.outs[wk].flush()
	}
}

func (w *fastConn) Write(p []byte) (int, error) {
	bp := sealBufPool.Get().(*[]byte)
	rec, err := w.rec.Seal(*bp, p)
	if err != nil {
		sealBufPool.Put(bp)
		return 0, err
	}
	_, err = w.a.Write(rec)
	*bp = rec[:0]
	sealBufPool.Put(bp)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}
