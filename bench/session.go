package bench

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/forwarder"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/bench/udpbatch"
)

// Mode is how TURN clients carry data to the server.
type Mode string

const (
	// ModeChannel sends ChannelData after a ChannelBind (4-byte header).
	ModeChannel Mode = "channel"
	// ModeSend sends Send indications after a CreatePermission (36-byte
	// header for IPv4), the path without channels.
	ModeSend Mode = "send"
)

// batchSize is datagrams per sendmmsg/recvmmsg on the client side.
const batchSize = 64

// sockBuf is SO_RCVBUF/SO_SNDBUF of harness sockets in bytes, as large as
// the servers' (4 MiB) so the harness does not drop what a server delivers.
const sockBuf = 4 << 20

// session is one client of a target: its own UDP socket (so its own
// 5-tuple, which SO_REUSEPORT hashes to one server thread), an allocation
// with a channel or permission to the peer, and a pre-built frame.
type session struct {
	target    Target
	uc        *net.UDPConn
	conn      *udpbatch.Conn
	tc        *turnclient.Client // nil for KindRaw
	frame     []byte             // one datagram carrying the payload to the peer
	payloadAt int                // offset of the payload in frame
}

// openSession sets up one client of t relaying to peer with a payload of
// size bytes. The socket binds local (port 0 picks one).
func openSession(t Target, local netip.AddrPort, peer netip.AddrPort, mode Mode, size int) (*session, error) {
	uc, err := udpbatch.Listen(local, udpbatch.Options{Buffer: sockBuf})
	if err != nil {
		return nil, err
	}
	s := &session{target: t, uc: uc}
	payload := make([]byte, size)
	switch t.Kind {
	case KindRaw:
		if err := rawBind(uc, t.Addr, peer); err != nil {
			uc.Close()
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		s.frame, s.payloadAt = payload, 0
	default:
		s.tc = turnclient.New(uc, t.Addr, t.Creds)
		if _, err := s.tc.Allocate(0); err != nil {
			uc.Close()
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		if mode == ModeSend {
			err = s.tc.CreatePermission(peer)
			if err == nil {
				s.frame, s.payloadAt, err = turnclient.SendIndication(peer, payload)
			}
		} else {
			err = s.tc.ChannelBind(peer, 0x4000)
			s.frame, s.payloadAt = turnclient.ChannelData(0x4000, payload), 4
		}
		if err != nil {
			_ = s.tc.Refresh(0)
			uc.Close()
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	s.conn, _ = udpbatch.New(uc, batchSize)
	return s, nil
}

// rawBind binds a forwarder mapping from conn to peer.
func rawBind(conn *net.UDPConn, fwd, peer netip.AddrPort) error {
	buf := make([]byte, 64)
	defer conn.SetReadDeadline(time.Time{})
	for try := 0; try < 4; try++ {
		if _, err := conn.WriteToUDPAddrPort(forwarder.Control(forwarder.OpBind, peer), fwd); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond << try))
		for {
			n, _, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			if op, _, ok := forwarder.ParseControl(buf[:n]); ok && op == forwarder.OpBind {
				return nil
			}
		}
	}
	return errors.New("forwarder: no bind reply")
}

// stopReading makes a blocked ReadBatch return, so that close can use the
// socket for its own request.
func (s *session) stopReading() { _ = s.uc.SetReadDeadline(time.Unix(1, 0)) }

// close releases the allocation (Refresh 0) or the forwarder mapping and
// closes the socket. The session's reader must have stopped.
func (s *session) close() {
	_ = s.uc.SetReadDeadline(time.Time{})
	if s.tc != nil {
		s.tc.Retries = 2
		_ = s.tc.Refresh(0)
	} else {
		_, _ = s.uc.WriteToUDPAddrPort(forwarder.Control(forwarder.OpUnbind, netip.AddrPort{}), s.target.Addr)
	}
	s.uc.Close()
}

// openSessions opens n sessions in parallel (setup is not measured, but it
// should not take long either). On error, the ones opened are closed.
func openSessions(t Target, n int, peer netip.AddrPort, mode Mode, size int) ([]*session, error) {
	ss := make([]*session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	local := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
	for i := range ss {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			ss[i], errs[i] = openSession(t, local, peer, mode, size)
			<-sem
		}()
	}
	wg.Wait()
	// Report the first failure and how many failed, not N copies of one error.
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		closeSessions(ss)
		return nil, fmt.Errorf("%d of %d clients failed setup, first: %w", failed, n, first)
	}
	return ss, nil
}

func closeSessions(ss []*session) {
	var wg sync.WaitGroup
	for _, s := range ss {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.close() }()
	}
	wg.Wait()
}
