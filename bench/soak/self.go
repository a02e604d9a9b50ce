package soak

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// selfRelayer is issue 22's item 9: on the wide listener, whose clusters include
// 127.0.0.0/8, an allocation asks for channels to ternd's own UDP listeners (TURN-UDP and
// TURN-DTLS, at their address and at another loopback address): each must get 403, while a
// channel to the echo peer on loopback is granted. A permission is per IP and is still
// installed for the listener's IP (docs/security.md); the refusal is of the listener's port.
// It also sends a TCP STUN header whose length is not a multiple of 4, which ternd must close
// at once instead of holding it for the first-message limit (reported, not asserted: a
// time).
type selfRelayer struct {
	cfg Config

	mu        sync.Mutex
	codes     map[string]int // peer -> code of its ChannelBind
	peerCode  int
	badHeader time.Duration // until the server closed it; -1 not closed
	errs      []string
	tried     bool
}

func (s *selfRelayer) run(ctx context.Context) {
	s.codes, s.badHeader = map[string]int{}, -1
	if !s.cfg.WideServer.IsValid() {
		return
	}
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 11, 0, 2}), 0)))
	if err != nil {
		s.note(err)
		return
	}
	defer uc.Close()
	c := turnclient.New(uc, s.cfg.WideServer, s.cfg.Creds)
	if _, err := c.Allocate(0); err != nil {
		s.note(err)
		return
	}
	defer func() { _ = c.Refresh(0) }()
	s.tried = true
	ch := uint16(0x4000)
	for _, own := range s.cfg.OwnUDP {
		other := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 2}), own.Port())
		for _, p := range []netip.AddrPort{own, other} {
			code := errCode(c.ChannelBind(p, ch), s.note)
			ch++
			s.mu.Lock()
			s.codes[p.String()] = code
			s.mu.Unlock()
		}
	}
	code := errCode(c.ChannelBind(s.cfg.Peer, ch), s.note)
	s.mu.Lock()
	s.peerCode = code
	s.mu.Unlock()

	if s.cfg.TCPServer.IsValid() {
		s.badLength(ctx)
	}
}

// badLength sends a STUN header declaring 65,001 bytes on a new TCP connection and waits
// up to 15 s (longer than the first-message limit) for the server to close it.
func (s *selfRelayer) badLength(ctx context.Context) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 11, 0, 3)}, Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp4", s.cfg.TCPServer.String())
	if err != nil {
		s.note(err)
		return
	}
	defer conn.Close()
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], 0x0001)
	binary.BigEndian.PutUint16(h[2:], 65001)
	binary.BigEndian.PutUint32(h[4:], 0x2112A442)
	start := time.Now()
	if _, err := conn.Write(h); err != nil {
		s.note(err)
		return
	}
	_ = conn.SetReadDeadline(start.Add(15 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return
		}
		s.mu.Lock()
		s.badHeader = time.Since(start)
		s.mu.Unlock()
	}
}

func (s *selfRelayer) note(err error) {
	s.mu.Lock()
	if len(s.errs) < 5 {
		s.errs = append(s.errs, err.Error())
	}
	s.mu.Unlock()
}

// timeLimit: the attack is a fixed count of requests, not bounded by the attack time.
func (s *selfRelayer) timeLimit(d time.Duration) time.Duration { return max(6*d, time.Minute) }

func (s *selfRelayer) report(r *AttackResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Figures = map[string]float64{"echo_peer_channel": float64(s.peerCode), "bad_length_closed_after_ns": float64(s.badHeader)}
	if !s.tried {
		r.failf("no allocation on the wide listener (%v)", s.errs)
		r.Summary = "not run"
		return
	}
	refused := 0
	for _, own := range s.cfg.OwnUDP {
		other := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 2}), own.Port())
		for _, p := range []netip.AddrPort{own, other} {
			code := s.codes[p.String()]
			r.Figures["channel_"+p.String()] = float64(code)
			if code == 403 {
				refused++
			} else {
				r.failf("ChannelBind to ternd's own listener %v: code %d, want 403", p, code)
			}
		}
	}
	if s.peerCode != 0 {
		r.failf("ChannelBind to the echo peer %v under the same cluster: code %d, want success", s.cfg.Peer, s.peerCode)
	}
	closed := "not closed within 15 s"
	if s.badHeader >= 0 {
		closed = fmt.Sprintf("closed after %v", s.badHeader.Round(time.Millisecond))
	}
	r.Summary = fmt.Sprintf("under a cluster of 127.0.0.0/8, ChannelBind to ternd's own UDP listener ports: %d of %d refused with 403; to the echo peer on loopback: code %d; a TCP STUN header declaring 65,001 bytes: %s",
		refused, 2*len(s.cfg.OwnUDP), s.peerCode, closed)
}
