package dtls

import (
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
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/turn"
)

// The TURN-DTLS listener's socket layer: one UDP socket, read by one
// goroutine, which finds each datagram's association by its source address.
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
	local *net.UDPAddr
	mu    sync.Mutex
	m     map[netip.AddrPort]*assoc
	// accept gets each association opened by a datagram from a new
	// address that starts a handshake.
	accept chan *assoc
	closed atomic.Bool
	// drops counts datagrams dropped because an association's queue was
	// full or no association would take them.
	drops atomic.Uint64
	// snd sends what the reader's records carry to peers, after each
	// batch; only the reader uses it.
	snd *peerSender
}

func newDTLSMux(conn *net.UDPConn, backlog int) (*dtlsMux, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &dtlsMux{conn: conn, rc: rc, local: conn.LocalAddr().(*net.UDPAddr), m: map[netip.AddrPort]*assoc{},
		accept: make(chan *assoc, backlog), snd: newPeerSender()}, nil
}

// assoc is one association: the net.Conn pion/dtls runs the handshake
// over, and, once the record layer has taken over, its keys and the
// connection that handles what it carries.
type assoc struct {
	mux    *dtlsMux
	remote netip.AddrPort
	raddr  *net.UDPAddr

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
}

var muxBufPool = sync.Pool{New: func() any { b := make([]byte, dtlsReadBuffer); return &b }}

// dispatch hands one datagram from the socket to its association, making
// one when it opens a handshake. b is the reader's buffer: what pion/dtls
// gets is copied, and what a record carries to a peer goes out by m.snd
// before the buffer is reused.
func (m *dtlsMux) dispatch(b []byte, from netip.AddrPort, res *turn.Result) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	m.mu.Lock()
	a := m.m[from]
	m.mu.Unlock()
	if a == nil {
		// Only a datagram that opens a handshake makes an association.
		if len(b) <= record.Header || b[0] != record.ContentHandshake || m.closed.Load() {
			m.drops.Add(1)
			return
		}
		a = m.newAssoc(from)
		select {
		case m.accept <- a:
			m.mu.Lock()
			m.m[from] = a
			m.mu.Unlock()
		default:
			m.drops.Add(1)
			return
		}
	}
	if f := a.fast.Load(); f != nil {
		a.handleFast(f, b, res)
		return
	}
	a.pushCopy(b)
}

// pushCopy queues a copy of b for pion/dtls.
func (a *assoc) pushCopy(b []byte) {
	bp := muxBufPool.Get().(*[]byte)
	*bp = append((*bp)[:0], b...)
	if !a.push(bp) {
		muxBufPool.Put(bp)
	}
}

func (m *dtlsMux) newAssoc(from netip.AddrPort) *assoc {
	return &assoc{mux: m, remote: from, raddr: net.UDPAddrFromAddrPort(from),
		ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// closeAll closes every association, once the socket is closed.
func (m *dtlsMux) closeAll() {
	m.mu.Lock()
	as := make([]*assoc, 0, len(m.m))
	for _, a := range m.m {
		as = append(as, a)
	}
	m.mu.Unlock()
	for _, a := range as {
		a.Close()
	}
	close(m.accept)
}

// close closes the socket; run then closes the associations.
func (m *dtlsMux) close() {
	m.closed.Store(true)
	m.conn.Close()
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
		if rec[0] != record.ContentAppData || binary.BigEndian.Uint16(rec[3:5]) != f.rec.Epoch() {
			a.pushCopy(rec)
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
	snd *peerSender
}

func (s *recordSink) Reply(msg []byte, client netip.AddrPort) error { return s.c.Reply(msg, client) }

func (s *recordSink) Forward(fd int, p []byte, peer netip.AddrPort) error {
	s.snd.add(fd, p, peer)
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
	if a.fast.Load() == nil {
		a.keys.Observe(p)
	}
	if err := a.mux.send(p, a.remote); err != nil {
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
		if f := a.fast.Load(); f != nil {
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
		a.mux.mu.Unlock()
	})
	return nil
}

func (a *assoc) LocalAddr() net.Addr  { return a.mux.local }
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
