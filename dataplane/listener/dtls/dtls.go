// Package dtls is the TURN-DTLS listener transport: DTLS 1.2 over one UDP
// socket, with pion/dtls (v2) for the handshake and Tern's own socket
// reader (mux) and AES-GCM record layer (package record, keyed from pion's
// key log) for application data. The reader finds each datagram's
// association by source address. From an address with none, only a whole
// first ClientHello makes one (package hello); it is unverified, under a cap of
// its own (mux.go: unverifiedMax, unverifiedLifetime) and outside the
// listener's connection limits, until the client returns the cookie of
// pion's HelloVerifyRequest (RFC 6347 §4.2.1), which the reader reads as
// pion writes it; the listener then admits it (admitVerified). Once an
// association's handshake is done
// with an ECDHE AES-GCM suite it opens application data records and sends
// what they carry through the listener's one delivery step
// (core.Conn.Handle) right there, batching what goes to peers. What peers
// send, relay workers seal into their own outbox of the listener
// (outbox_linux.go, used by that worker alone, so it has no lock) and send
// with one sendmmsg per wake-up (core.Conn.QueueToClient). A hand-over to
// a successor process moves the socket and the associations whose record
// layer had taken over, as their record state (handover.go).
//
// Lock order. The package has five locks (package record's Keys.mu, taken
// when pion writes through an association, is a leaf: nothing is taken
// under it). assoc.amu is the only one held while others are taken:
//   - assoc.amu serialises an association's admission by the reader
//     (dtlsMux.verify, which calls the listener's Admit under it) with
//     the end of its handshake goroutine (assoc.ended). Admit takes
//     admission's and core's locks and may close another association
//     (its shed victim), which takes that one's hmu, qmu and dtlsMux.mu,
//     never an amu; so amu comes first, and no other lock is held when it
//     is taken.
//
// The other four are never held while another of them is taken:
//   - dtlsMux.pmu guards the hand-over's pause channel (handover.go);
//     held only to read or change it.
//   - dtlsMux.mu guards the address-to-association map and the list and
//     count of unverified associations; held only to read or change them.
//   - assoc.qmu guards an association's queue of datagrams for pion/dtls
//     and its read deadline; held only to change them.
//   - assoc.hmu serialises the reader's handling of an association's
//     records with its Close. The reader holds it across core.Conn.Handle,
//     which calls the engine (its per-allocation lock), the association's
//     Sink (sealing and sending a reply: no lock) and
//     admission.Set.SetAllocated (admission's lock). None of those takes a
//     lock of this package or calls back into it, and admission takes no
//     lock under its own; Close takes hmu, then qmu, then dtlsMux.mu, one
//     after the other. So an association may be closed from any goroutine
//     (the accept loop shedding it, core.Base.CloseAll, its own goroutine)
//     as long as the closer holds no lock: core and admission close
//     connections only after releasing theirs.
package dtls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/dtls/v2"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/admission"
	"github.com/tern-gw/tern/dataplane/listener/certs"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// Listener is a TURN-DTLS listener: DTLS 1.2 records over UDP
// (github.com/pion/dtls/v2), one TURN message per record.
type Listener struct {
	core.Base
	mux   *dtlsMux
	conf  *dtls.Config
	certs *certs.Holder
	// outs batch the records relay workers seal for the listener's
	// associations, one per worker (outbox_linux.go).
	outs []*outbox
	// started is set once the reader runs (Resume); adopted are the
	// associations handed over to it until then (handover.go).
	started bool
	adopted []*assoc
}

// LocalAddr is the bound address, for logs.
func (l *Listener) LocalAddr() string { return l.mux.local.String() }

// dtlsBacklog is how many associations may wait for the accept loop.
const dtlsBacklog = 128

// Start opens the TURN-DTLS listener lc, serving clients that may reach
// the peers of al. Its errors name the listener: an address that does not
// parse, a port in use, a certificate or key that cannot be read.
func Start(env core.Env, lc config.Listener, al *allowlist.List) (*Listener, error) {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	// The handshake runs per connection in its own goroutine (dtls.Listen
	// would run it inside Accept, where one slow client stalls the rest),
	// and only datagrams that open a DTLS handshake create a connection.
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(lc.Port))))
	if err != nil {
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	l, err := open(env, lc, al, uc)
	if err != nil {
		return nil, err
	}
	l.Resume()
	return l, nil
}

// newConfig is the listener's handshake config, with the certificate of
// h; each association gets a copy (assocConfig).
func newConfig(h *certs.Holder) *dtls.Config {
	return &dtls.Config{
		GetCertificate:       h.GetDTLSCertificate,
		ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
	}
}

func (l *Listener) accept() {
	for a := range l.mux.accept {
		// Unverified: the association runs pion's handshake, which starts
		// with a HelloVerifyRequest, but takes no share of the listener's
		// limits until its client returns the cookie (admitVerified).
		a.conn = l.NewConn(a)
		go l.serveConn(a.conn, a)
	}
}

// admitVerified admits association a, whose client has just returned the
// cookie of pion's HelloVerifyRequest, which proves its address: it takes
// its address's share of connectionsPerIP and a place under
// maxConnections at once, as a TCP connection does after its handshake.
// It is called by the listener's reader (dtlsMux.verify).
func (l *Listener) admitVerified(a *assoc) bool {
	return l.Admit(a.conn, true) == admission.Admitted
}

// dtlsReadBuffer holds the largest record pion/dtls hands on: it reads
// datagrams of at most 8,192 bytes.
const dtlsReadBuffer = 8 << 10

var dtlsBufPool = sync.Pool{New: func() any { b := make([]byte, dtlsReadBuffer); return &b }}

// assocConfig returns the handshake config of association a: a copy of the
// listener's, whose key log writer is a's, so that the master secret of this
// handshake reaches a's record layer (record.Keys).
func (l *Listener) assocConfig(a *assoc) *dtls.Config {
	conf := *l.conf
	conf.KeyLogWriter = &a.keys
	return &conf
}

func (l *Listener) serveConn(c *core.Conn, a *assoc) {
	ctx, cancel := context.WithTimeout(context.Background(), core.HandshakeTimeout)
	dc, err := dtls.ServerWithContext(ctx, a, l.assocConfig(a))
	cancel()
	if err == nil && !a.verified.Load() {
		// pion checks the cookie too, so this does not happen; but only
		// an admitted association may serve.
		err = errors.New("handshake done before the cookie was seen")
		dc.Close()
	}
	if err != nil {
		if !a.ended() {
			a.Close() // unverified: nothing admitted to finish
			return
		}
		defer c.Finish()
		l.Env.Log.Debug("dtls handshake failed", "client", c.FT.String(), "error", err)
		return
	}
	defer func() {
		a.ended()
		c.Finish()
	}()
	c.W = dc
	// With an AES-GCM suite the listener's reader handles application
	// data from now on; this goroutine only reads what pion still gets
	// (records queued before the switch, alerts) and keeps the idle
	// timeout.
	var fast *fastAssoc
	if rec, err := a.gcmRecords(); err == nil {
		fast = &fastAssoc{rec: rec, c: c}
		fast.sink = recordSink{c: c, snd: a.mux.snd}
		fast.last.Store(time.Now().UnixNano())
		fc := &fastConn{Conn: dc, a: a, rec: rec, outs: l.outs}
		c.W, c.Out = fc, fc
		a.fast.Store(fast)
	} else if !errors.Is(err, record.ErrNoFastPath) {
		// An AES-GCM association whose keys could not be derived still
		// works, on pion's slower Conn; say so, since every association
		// would be affected alike.
		l.Env.Log.Warn("dtls record layer: association left to pion/dtls", "client", c.FT.String(), "error", err)
	}
	bp := dtlsBufPool.Get().(*[]byte)
	defer dtlsBufPool.Put(bp)
	buf := *bp
	var res turn.Result
	if fast != nil {
		l.watchFast(c, dc, fast, buf, &res)
		return
	}
	var dl core.ReadDeadline
	last, limit := time.Now(), core.HandshakeTimeout // the first message must come soon
	for {
		dl.Apply(dc, last.Add(limit))
		n, err := dc.Read(buf)
		if err != nil {
			if core.IsTimeout(err) {
				dl.Expired()
			}
			if core.IsTimeout(err) && (time.Since(last) < limit || !c.Expired(last)) {
				limit = c.IdleLimit()
				continue
			}
			return
		}
		last = time.Now()
		if !c.Handle(buf[:n], &res, c) {
			return
		}
		limit = c.IdleLimit()
	}
}

// watchFast keeps an association's idle timeout while the listener's
// reader handles its messages: it wakes when the association would have
// been silent too long, and looks at when the reader last handled one. It
// also handles what pion/dtls still delivers (records that came before the
// reader took over).
func (l *Listener) watchFast(c *core.Conn, dc net.Conn, f *fastAssoc, buf []byte, res *turn.Result) {
	start := f.last.Load()
	if f.adopted {
		start = 0 // its first message came to the process that handed it over
	}
	for {
		// The first message must come within core.HandshakeTimeout; until it
		// has, wake at the idle limit too, to take that limit up as soon
		// as it applies.
		deadline := time.Unix(0, f.last.Load()).Add(c.IdleLimit())
		if f.last.Load() == start {
			deadline = time.Unix(0, start).Add(core.HandshakeTimeout)
			if d := time.Now().Add(c.IdleLimit()); d.Before(deadline) {
				deadline = d
			}
		}
		_ = dc.SetReadDeadline(deadline)
		n, err := dc.Read(buf)
		if err == nil {
			f.last.Store(time.Now().UnixNano())
			if !c.Handle(buf[:n], res, c) {
				return
			}
			continue
		}
		if !core.IsTimeout(err) {
			return
		}
		last := time.Unix(0, f.last.Load())
		limit := c.IdleLimit()
		if f.last.Load() == start {
			limit = core.HandshakeTimeout
		}
		if time.Since(last) < limit || !c.Expired(last) {
			continue
		}
		return
	}
}

// Close closes every association (sending close_notify on those the
// record layer serves), stops accepting and deletes their allocations.
func (l *Listener) Close() {
	l.Closed.Store(true)
	// Before the socket closes, so that each association's close_notify
	// leaves (RFC 5246 §7.2.1).
	l.mux.closeAssocs()
	l.mux.close()
	if !l.started { // adopted, never resumed: no reader to close them
		l.started = true
		l.mux.closeAll()
		for _, a := range l.adopted {
			a.ended()
			a.conn.Finish()
		}
		l.adopted = nil
	}
	l.certs.Close()
	l.CloseAll()
}

// ConnStats returns the listener's connection counts, with the unverified
// associations closed by the reader (evicted or expired) under Unverified.
func (l *Listener) ConnStats() (core.ConnStats, bool) {
	cs, ok := l.Base.ConnStats()
	cs.Unverified = l.mux.evicted.Load() + l.mux.expired.Load()
	return cs, ok
}

// FoldStats adds the counters of the listener's associations to sum, and
// the datagrams its socket reader dropped under DropUnexpected: from an
// address with no association, all but a whole first ClientHello (and
// that one too while 2 × unverifiedMax unverified associations still have
// goroutines, or the accept backlog is full); to an unverified association,
// all but a ClientHello without a cookie or with pion's; and those that
// found pion's queue full.
func (l *Listener) FoldStats(sum *stats.Sum) {
	l.Base.FoldStats(sum)
	sum.Drops[turn.DropUnexpected] += l.mux.drops.Load()
}
