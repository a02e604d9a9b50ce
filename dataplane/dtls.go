package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/transport/v2/udp"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// dtlsListener is a TURN-DTLS listener: DTLS 1.2 records over UDP
// (github.com/pion/dtls/v2), one TURN message per record.
type dtlsListener struct {
	connListener
	ln   net.Listener
	conf *dtls.Config
}

func (l *dtlsListener) localAddr() string { return l.ln.Addr().String() }

func (s *Server) startDTLS(lc config.Listener, pol *policy) (*dtlsListener, error) {
	pair, cert, key, err := loadKeyPair(lc)
	if err != nil {
		return nil, err
	}
	l := &dtlsListener{connListener: connListener{cfg: lc, srv: s, proto: turn.ProtoDTLS, cert: cert, key: key,
		conns: map[*clientConn]struct{}{}, idle: s.idleTimeout()}}
	l.policy.Store(pol)
	l.conf = &dtls.Config{
		Certificates:         []tls.Certificate{pair},
		ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
	}
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	// The handshake runs per connection in its own goroutine (dtls.Listen
	// would run it inside Accept, where one slow client stalls the rest),
	// and only datagrams that open a DTLS handshake create a connection.
	lcfg := udp.ListenConfig{AcceptFilter: func(b []byte) bool { return len(b) > 13 && b[0] == 22 }}
	ln, err := lcfg.Listen("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(lc.Port))))
	if err != nil {
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	l.ln = ln
	go l.accept()
	return l, nil
}

func (l *dtlsListener) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		cc := newClientConn(&l.connListener, c)
		if !l.add(cc) {
			c.Close()
			return
		}
		go l.serveConn(cc)
	}
}

func (l *dtlsListener) serveConn(c *clientConn) {
	defer c.finish()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	dc, err := dtls.ServerWithContext(ctx, c.c, l.conf)
	cancel()
	if err != nil {
		l.srv.log.Debug("dtls handshake failed", "client", c.ft.String(), "error", err)
		return
	}
	c.w = dc
	go c.writer()
	buf := make([]byte, maxStreamMessage)
	var res turn.Result
	for {
		_ = dc.SetReadDeadline(time.Now().Add(l.idle))
		n, err := dc.Read(buf)
		if err != nil {
			return
		}
		c.handle(buf[:n], &res)
	}
}

func (l *dtlsListener) close() {
	l.closed.Store(true)
	l.ln.Close()
	l.closeConns()
}
