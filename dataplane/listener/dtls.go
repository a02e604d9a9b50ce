package listener

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
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// dtlsListener is a TURN-DTLS listener: DTLS 1.2 records over UDP
// (github.com/pion/dtls/v2), one TURN message per record.
type dtlsListener struct {
	connListener
	mux   *dtlsMux
	conf  *dtls.Config
	certs *certHolder
}

func (l *dtlsListener) LocalAddr() string { return l.mux.local.String() }

// dtlsBacklog is how many associations may wait for the accept loop.
const dtlsBacklog = 128

func startDTLS(env Env, lc config.Listener, al *allowlist.List) (*dtlsListener, error) {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	certs, err := newCertHolder(lc, env.Log)
	if err != nil {
		return nil, err
	}
	l := &dtlsListener{certs: certs}
	l.init(env, lc, turn.ProtoDTLS, al)
	l.cert, l.key = certs.PEM()
	l.conf = &dtls.Config{
		GetCertificate:       certs.GetDTLSCertificate,
		ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
	}
	// The handshake runs per connection in its own goroutine (dtls.Listen
	// would run it inside Accept, where one slow client stalls the rest),
	// and only datagrams that open a DTLS handshake create a connection.
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(lc.Port))))
	if err != nil {
		certs.Close()
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	if env.SocketBuffer > 0 {
		// One socket carries every association: the default buffers
		// (about 200 KiB) overflow in a burst of a few hundred records.
		setDTLSBuffers(uc, env.SocketBuffer)
	}
	if l.mux, err = newDTLSMux(uc, dtlsBacklog); err != nil {
		uc.Close()
		certs.Close()
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	go l.mux.run()
	go l.accept()
	return l, nil
}

func (l *dtlsListener) accept() {
	for c := range l.mux.accept {
		cc := newClientConn(&l.connListener, c)
		// A datagram's source address can be forged, so an association
		// takes its address's share only once the handshake, whose cookie
		// exchange proves the address, is done.
		switch l.admit(cc, false) {
		case refused:
			c.Close()
			continue
		case closing:
			c.Close()
			continue // until the reader closes the channel
		}
		go l.serveConn(cc, c)
	}
}

// dtlsReadBuffer holds the largest record pion/dtls hands on: it reads
// datagrams of at most 8,192 bytes.
const dtlsReadBuffer = 8 << 10

var dtlsBufPool = sync.Pool{New: func() any { b := make([]byte, dtlsReadBuffer); return &b }}

// assocConfig returns the handshake config of association a: a copy of the
// listener's, whose key log writer is a's, so that the master secret of this
// handshake reaches a's record layer (handshakeKeys).
func (l *dtlsListener) assocConfig(a *assoc) *dtls.Config {
	conf := *l.conf
	conf.KeyLogWriter = &a.keys
	return &conf
}

func (l *dtlsListener) serveConn(c *clientConn, a *assoc) {
	defer c.finish()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	dc, err := dtls.ServerWithContext(ctx, a, l.assocConfig(a))
	cancel()
	if err != nil {
		l.env.Log.Debug("dtls handshake failed", "client", c.ft.String(), "error", err)
		return
	}
	c.w = dc
	if !l.claimIP(c) {
		l.refusedPerIP.Add(1)
		return
	}
	// With an AES-GCM suite the listener's reader handles application
	// data from now on; this goroutine only reads what pion still gets
	// (records queued before the switch, alerts) and keeps the idle
	// timeout.
	var fast *fastAssoc
	if rec, err := a.gcmRecords(); err == nil {
		fast = &fastAssoc{rec: rec, c: c}
		fast.last.Store(time.Now().UnixNano())
		c.w = &fastConn{Conn: dc, a: a, rec: rec}
		a.fast.Store(fast)
	} else if !errors.Is(err, errNoFastPath) {
		// An AES-GCM association whose keys could not be derived still
		// works, on pion's slower Conn; say so, since every association
		// would be affected alike.
		l.env.Log.Warn("dtls record layer: association left to pion/dtls", "client", c.ft.String(), "error", err)
	}
	bp := dtlsBufPool.Get().(*[]byte)
	defer dtlsBufPool.Put(bp)
	buf := *bp
	var res turn.Result
	if fast != nil {
		l.watchFast(c, dc, fast, buf, &res)
		return
	}
	var dl readDeadline
	last, limit := time.Now(), handshakeTimeout // the first message must come soon
	for {
		dl.apply(dc, last.Add(limit))
		n, err := dc.Read(buf)
		if err != nil {
			if isTimeout(err) {
				dl.expired()
			}
			if isTimeout(err) && (time.Since(last) < limit || !c.expired(last)) {
				limit = c.idleLimit()
				continue
			}
			return
		}
		last = time.Now()
		if !c.handle(buf[:n], &res) {
			return
		}
		limit = c.idleLimit()
	}
}

// watchFast keeps an association's idle timeout while the listener's
// reader handles its messages: it wakes when the association would have
// been silent too long, and looks at when the reader last handled one. It
// also handles what pion/dtls still delivers (records that came before the
// reader took over).
func (l *dtlsListener) watchFast(c *clientConn, dc net.Conn, f *fastAssoc, buf []byte, res *turn.Result) {
	start := f.last.Load()
	for {
		// The first message must come within handshakeTimeout; until it
		// has, wake at the idle limit too, to take that limit up as soon
		// as it applies.
		deadline := time.Unix(0, f.last.Load()).Add(c.idleLimit())
		if f.last.Load() == start {
			deadline = time.Unix(0, start).Add(handshakeTimeout)
			if d := time.Now().Add(c.idleLimit()); d.Before(deadline) {
				deadline = d
			}
		}
		_ = dc.SetReadDeadline(deadline)
		n, err := dc.Read(buf)
		if err == nil {
			f.last.Store(time.Now().UnixNano())
			if !c.handle(buf[:n], res) {
				return
			}
			continue
		}
		if !isTimeout(err) {
			return
		}
		last := time.Unix(0, f.last.Load())
		limit := c.idleLimit()
		if f.last.Load() == start {
			limit = handshakeTimeout
		}
		if time.Since(last) < limit || !c.expired(last) {
			continue
		}
		return
	}
}

// Close stops accepting, closes every association and deletes their
// allocations.
func (l *dtlsListener) Close() {
	l.closed.Store(true)
	l.mux.close()
	l.certs.Close()
	l.closeConns()
}

// FoldStats adds the counters of the listener's associations to sum, and
// the datagrams its socket reader dropped (from an address with no
// association that do not open a handshake, or with pion's queue full)
// under DropUnexpected.
func (l *dtlsListener) FoldStats(sum *stats.Sum) {
	l.connListener.FoldStats(sum)
	sum.Drops[turn.DropUnexpected] += l.mux.drops.Load()
}
