package dtls

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/admission"
	"github.com/tern-gw/tern/dataplane/listener/certs"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// The hand-over of a TURN-DTLS listener to a successor process (ternd
// --takeover, package dataplane): its one socket travels as a descriptor,
// and each association whose record layer had taken over (handshake done,
// AES-GCM suite) as its addresses and record state (record.State). The
// successor has no pion/dtls session for them: it opens and seals their
// records with its own record layer, its reader takes their alerts, and
// Close sends close_notify as for any association. Associations still in
// their handshake, or left to pion (suites without a fast path), are not
// handed over: their clients time out and shake hands again.

// SeqSkip is how far past the old process's next sequence number a
// successor starts sealing an association's records: the old process
// seals nothing once paused, and this margin makes sure that no record it
// sealed on its way there shares a sequence number, and so an AES-GCM
// nonce, with one of the successor's.
const SeqSkip = 1 << 16

// Association is an association of a listener handed over: the
// connection its allocations were made over (turn.Transport), its client
// and local addresses (the local one is the listener's address, or the
// address the client sent to on a wildcard listener) and its record
// state.
type Association struct {
	Conn          *core.Conn
	Client, Local netip.AddrPort
	Records       record.State
}

// Socket returns the descriptor of the listener's socket, for a hand-over.
func (l *Listener) Socket() (int, error) {
	var fd int
	err := l.mux.rc.Control(func(s uintptr) { fd = int(s) })
	return fd, err
}

// Pause stops the listener's reader and returns once it has stopped:
// datagrams then wait in the socket's kernel buffer. The handshakes under
// way go on (pion/dtls's goroutines), but nothing they receive arrives.
func (l *Listener) Pause() {
	m := l.mux
	m.pmu.Lock()
	if m.pause != nil || !l.started || m.closed.Load() {
		m.pmu.Unlock()
		return
	}
	m.pause = make(chan struct{})
	m.pmu.Unlock()
	_ = m.conn.SetReadDeadline(time.Unix(1, 0))
	<-m.parkedC
}

// Resume lets a paused listener read again, or starts an adopted one.
func (l *Listener) Resume() {
	if !l.started {
		l.started = true
		go l.mux.run()
		go l.accept()
		for _, a := range l.adopted {
			go l.watchAdopted(a)
		}
		l.adopted = nil
		return
	}
	m := l.mux
	m.pmu.Lock()
	defer m.pmu.Unlock()
	if m.pause == nil {
		return
	}
	_ = m.conn.SetReadDeadline(time.Time{})
	close(m.pause)
	m.pause = nil
}

// parked is called by the reader when a read fails: when the listener is
// paused it waits until it is resumed or closed and reports true if it
// may read again.
func (m *dtlsMux) parked() bool {
	m.pmu.Lock()
	ch := m.pause
	m.pmu.Unlock()
	if ch == nil || m.closed.Load() {
		return false
	}
	m.parkedC <- struct{}{}
	<-ch
	return !m.closed.Load()
}

// Associations returns the associations a successor can take over; the
// caller has paused the listener (so no record is opened meanwhile).
func (l *Listener) Associations() []Association {
	m := l.mux
	m.mu.Lock()
	as := make([]*assoc, 0, len(m.m))
	for _, a := range m.m {
		as = append(as, a)
	}
	m.mu.Unlock()
	var out []Association
	for _, a := range as {
		f := a.fast.Load()
		if f == nil || !a.verified.Load() {
			continue
		}
		a.hmu.Lock()
		closed := a.closed
		a.hmu.Unlock()
		if closed {
			continue
		}
		out = append(out, Association{Conn: f.c, Client: a.remote, Local: core.AddrPortOf(a.laddr), Records: f.rec.State()})
	}
	return out
}

// HandedOver tells the listener that a successor serves its socket and
// associations now: nothing more is sent on the socket, and closing an
// association sends no close_notify. The listener stays paused.
func (l *Listener) HandedOver() { l.mux.gone.Store(true) }

// Adopt makes a TURN-DTLS listener for lc of the socket fd that another
// ternd bound for it and handed over, with the associations as (record
// state and addresses; Conn is ignored), serving clients that may reach
// the peers of al. It reads nothing until Resume. It returns the listener
// and the connection of each association, in the order of as, for the
// allocations made over them (turn.Engine.Import); an error names the
// listener (a descriptor that is not a UDP socket bound to lc's address,
// a record state that does not make a record layer). fd is closed on an
// error, or owned by the listener.
func Adopt(env core.Env, lc config.Listener, al *allowlist.List, fd int, as []Association) (*Listener, []*core.Conn, error) {
	f := os.NewFile(uintptr(fd), "dtls-listener")
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("listener %q: handed-over socket: %w", lc.Name, err)
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, nil, fmt.Errorf("listener %q: handed-over socket is not a UDP socket", lc.Name)
	}
	if !boundFor(core.AddrPortOf(uc.LocalAddr()), lc) {
		uc.Close()
		return nil, nil, fmt.Errorf("listener %q: handed-over socket bound to %s, not %s:%d", lc.Name, uc.LocalAddr(), lc.Address, lc.Port)
	}
	l, err := open(env, lc, al, uc)
	if err != nil {
		return nil, nil, err
	}
	conns := make([]*core.Conn, len(as))
	for i, ha := range as {
		c, err := l.adoptAssoc(ha)
		if err != nil {
			l.HandedOver() // the old process may serve on: send it nothing
			l.Close()
			return nil, nil, fmt.Errorf("listener %q: association of %s: %w", lc.Name, ha.Client, err)
		}
		conns[i] = c
	}
	return l, conns, nil
}

// adoptAssoc installs a handed-over association.
func (l *Listener) adoptAssoc(ha Association) (*core.Conn, error) {
	rec, err := record.FromState(ha.Records, SeqSkip)
	if err != nil {
		return nil, err
	}
	m := l.mux
	a := m.newAssoc(ha.Client, ha.Local.Addr())
	a.verified.Store(true)
	c := l.NewConn(a)
	a.conn = c
	if l.Admit(c, true) != admission.Admitted {
		return nil, errors.New("refused by the listener's connection limits")
	}
	a.admitted = true
	fast := &fastAssoc{rec: rec, c: c, adopted: true}
	fast.sink = recordSink{c: c, snd: m.snd}
	fast.last.Store(time.Now().UnixNano())
	fc := &fastConn{Conn: a, a: a, rec: rec, outs: l.outs}
	c.W, c.Out = fc, fc
	a.fast.Store(fast)
	m.mu.Lock()
	if m.m[ha.Client] != nil {
		m.mu.Unlock()
		c.Finish()
		return nil, errors.New("client address handed over twice")
	}
	m.m[ha.Client] = a
	m.mu.Unlock()
	l.adopted = append(l.adopted, a)
	return c, nil
}

// watchAdopted keeps an adopted association's idle timeout (watchFast,
// over the association itself: nothing is queued for it, so its Read
// only waits) and finishes its connection when it ends.
func (l *Listener) watchAdopted(a *assoc) {
	c := a.conn
	defer func() {
		a.ended()
		c.Finish()
	}()
	bp := dtlsBufPool.Get().(*[]byte)
	defer dtlsBufPool.Put(bp)
	var res turn.Result
	c.CheckAllocation()
	l.watchFast(c, a, a.fast.Load(), *bp, &res)
}

// open makes the listener of the bound socket uc; Start and Adopt share it.
func open(env core.Env, lc config.Listener, al *allowlist.List, uc *net.UDPConn) (*Listener, error) {
	h, err := certs.New(lc, env.Log)
	if err != nil {
		uc.Close()
		return nil, err
	}
	l := &Listener{certs: h}
	l.Init(env, lc, turn.ProtoDTLS, al)
	l.Cert, l.Key = h.PEM()
	l.conf = newConfig(h)
	if env.SocketBuffer > 0 {
		udpio.SetConnBuffers(uc, env.SocketBuffer)
	}
	if l.mux, err = newDTLSMux(uc, dtlsBacklog); err != nil {
		uc.Close()
		h.Close()
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	l.mux.admit = l.admitVerified
	l.outs = newOutboxes(l.mux.rc, env.RelayWorkers)
	return l, nil
}

// boundFor reports whether a socket bound to got is the one this package binds for lc: at
// lc's address and port, where a listener on 0.0.0.0 is a dual-stack socket on [::] (open
// binds with network "udp", and Go makes an unspecified IPv4 address an IPv6 socket), so
// any unspecified address stands for any other.
func boundFor(got netip.AddrPort, lc config.Listener) bool {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil || got.Port() != uint16(lc.Port) {
		return false
	}
	ip = ip.Unmap()
	if ip.IsUnspecified() {
		return got.Addr().IsUnspecified()
	}
	return got.Addr().Unmap() == ip
}
