package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	crand "crypto/rand"

	"github.com/tern-gw/tern/turn"
)

// reservationLifetime is how long a port reserved by EVEN-PORT with the R
// bit waits for the Allocate that claims it (RFC 8656 §14.6 suggests 30 s).
const reservationLifetime = 30 * time.Second

// maxPeerPayload is the largest peer datagram relayed, in bytes; larger ones
// are dropped rather than truncated. WebRTC media stays under ~1200 bytes.
const maxPeerPayload = 8192

// relayPool opens relay sockets on one address within a port range and
// implements turn.RelayAllocator.
type relayPool struct {
	bind     netip.Addr // address relay sockets bind to
	public   netip.Addr // address advertised in XOR-RELAYED-ADDRESS
	min, max uint16
	srv      *Server

	mu           sync.Mutex
	used         []bool // indexed by port-min
	reservations map[uint64]*reservation
}

type reservation struct {
	conn    *net.UDPConn
	port    uint16
	expires time.Time
}

func newRelayPool(srv *Server, bind, public netip.Addr, min, max uint16) *relayPool {
	if !public.IsValid() {
		public = bind
	}
	return &relayPool{
		bind: bind, public: public, min: min, max: max, srv: srv,
		used:         make([]bool, int(max)-int(min)+1),
		reservations: map[uint64]*reservation{},
	}
}

// Allocate implements turn.RelayAllocator: it binds a UDP socket on a free
// port of the range (an even one, and reserves the next, when asked) and
// starts relaying from it.
func (p *relayPool) Allocate(a *turn.Allocation, req turn.RelayRequest) (turn.Relay, uint64, error) {
	if req.IPv6 != p.bind.Is6() {
		return nil, 0, turn.ErrAddressFamily
	}
	var (
		conn  *net.UDPConn
		port  uint16
		token uint64
		err   error
	)
	if req.Token != 0 {
		conn, port, err = p.claim(req.Token)
	} else {
		conn, port, token, err = p.open(req.EvenPort, req.ReservePair)
	}
	if err != nil {
		return nil, 0, err
	}
	if req.DontFragment {
		if rc, err := conn.SyscallConn(); err != nil || setDontFragment(rc, p.bind.Is6()) != nil {
			p.closePort(conn, port)
			return nil, 0, turn.ErrDontFragment
		}
	}
	r := &relay{conn: conn, port: port, addr: netip.AddrPortFrom(p.public, port), pool: p, alloc: a}
	go r.serve()
	return r, token, nil
}

// open binds a socket on a free port; with pair it also binds port+1 and
// holds it under a fresh reservation token.
func (p *relayPool) open(even, pair bool) (*net.UDPConn, uint16, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.used)
	start := rand.IntN(n)
	for i := 0; i < n; i++ {
		idx := (start + i) % n
		port := p.min + uint16(idx)
		if p.used[idx] || (even && port%2 != 0) {
			continue
		}
		if pair && (idx+1 >= n || p.used[idx+1]) {
			continue
		}
		conn, err := p.listen(port)
		if err != nil {
			continue // taken by another process: try the next one
		}
		var token uint64
		if pair {
			next, err := p.listen(port + 1)
			if err != nil {
				conn.Close()
				continue
			}
			token = newToken()
			p.used[idx+1] = true
			p.reservations[token] = &reservation{conn: next, port: port + 1, expires: time.Now().Add(reservationLifetime)}
		}
		p.used[idx] = true
		return conn, port, token, nil
	}
	return nil, 0, 0, turn.ErrNoCapacity
}

// claim takes the socket reserved under token.
func (p *relayPool) claim(token uint64) (*net.UDPConn, uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.reservations[token]
	if !ok {
		return nil, 0, turn.ErrNoCapacity
	}
	delete(p.reservations, token)
	return r.conn, r.port, nil
}

// sweep releases reservations nobody claimed in time.
func (p *relayPool) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, r := range p.reservations {
		if now.After(r.expires) {
			r.conn.Close()
			p.used[r.port-p.min] = false
			delete(p.reservations, tok)
		}
	}
}

func (p *relayPool) listen(port uint16) (*net.UDPConn, error) {
	network := "udp4"
	if p.bind.Is6() {
		network = "udp6"
	}
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(p.bind, port).String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

func (p *relayPool) closePort(conn *net.UDPConn, port uint16) {
	conn.Close()
	p.mu.Lock()
	p.used[port-p.min] = false
	p.mu.Unlock()
}

func newToken() uint64 {
	var b [8]byte
	for {
		if _, err := crand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("dataplane: no randomness: %v", err))
		}
		if t := binary.BigEndian.Uint64(b[:]); t != 0 {
			return t
		}
	}
}

// relay is one allocation's relay socket (turn.Relay).
type relay struct {
	conn   *net.UDPConn
	port   uint16
	addr   netip.AddrPort
	pool   *relayPool
	alloc  *turn.Allocation
	closed atomic.Bool
}

// Addr implements turn.Relay.
func (r *relay) Addr() netip.AddrPort { return r.addr }

// Close implements turn.Relay: it closes the socket, which ends serve, and
// frees the port.
func (r *relay) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.pool.closePort(r.conn, r.port)
	return nil
}

// send writes a client's payload to peer.
func (r *relay) send(b []byte, peer netip.AddrPort) error {
	_, err := r.conn.WriteToUDPAddrPort(b, peer)
	return err
}

// serve reads datagrams from peers and hands them, framed by the engine, to
// the client's transport.
func (r *relay) serve() {
	buf := make([]byte, turn.PeerHeadroom+maxPeerPayload+1+turn.PeerTailroom)
	payload := buf[turn.PeerHeadroom : turn.PeerHeadroom+maxPeerPayload+1]
	srv := r.pool.srv
	out, _ := r.alloc.Transport.(clientWriter)
	st := srv.stats
	for {
		n, from, err := r.conn.ReadFromUDPAddrPort(payload)
		if err != nil {
			if r.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		st.peerRx.Add(1)
		st.peerRxBytes.Add(uint64(n))
		if n > maxPeerPayload {
			st.drops[turn.DropMalformed].Add(1)
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		msg, ok := srv.engine.HandlePeer(r.alloc, from, buf, turn.PeerHeadroom, n)
		if !ok {
			st.drops[turn.DropNoPermission].Add(1)
			continue
		}
		if out != nil {
			out.writeToClient(msg, r.alloc.FiveTuple.Client)
		}
	}
}
