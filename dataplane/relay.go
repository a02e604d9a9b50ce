package dataplane

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/turn"
)

// reservationLifetime is how long a port reserved by EVEN-PORT with the R
// bit waits for the Allocate that claims it (RFC 8656 §14.9 suggests 30 s).
const reservationLifetime = 30 * time.Second

// maxPeerPayload is the largest peer datagram relayed, in bytes; larger ones
// are dropped rather than truncated. WebRTC media stays under ~1200 bytes.
const maxPeerPayload = 8192

// relayPool opens relay sockets on one address within a port range and
// implements turn.RelayAllocator. The socket work is platform-specific
// (relay_linux.go: non-blocking sockets served by epoll workers).
type relayPool struct {
	bind     netip.Addr // address relay sockets bind to
	public   netip.Addr // address advertised in XOR-RELAYED-ADDRESS
	min, max uint16
	srv      *Server
	io       *relayIO // platform part: socket creation and serving

	mu           sync.Mutex
	used         []bool // indexed by port-min
	reservations map[uint64]*reservation
}

type reservation struct {
	sock    relaySocket
	port    uint16
	expires time.Time
}

func newRelayPool(srv *Server, bind, public netip.Addr, min, max uint16) (*relayPool, error) {
	if !public.IsValid() {
		public = bind
	}
	p := &relayPool{
		bind: bind, public: public, min: min, max: max, srv: srv,
		used:         make([]bool, int(max)-int(min)+1),
		reservations: map[uint64]*reservation{},
	}
	var err error
	p.io, err = newRelayIO(p)
	return p, err
}

// Allocate implements turn.RelayAllocator: it binds a UDP socket on a free
// port of the range (an even one, and reserves the next, when asked) and
// starts relaying from it.
func (p *relayPool) Allocate(a *turn.Allocation, req turn.RelayRequest) (turn.Relay, uint64, error) {
	if req.IPv6 != p.bind.Is6() {
		return nil, 0, turn.ErrAddressFamily
	}
	var (
		sock  relaySocket
		port  uint16
		token uint64
		err   error
	)
	if req.Token != 0 {
		sock, port, err = p.claim(req.Token)
	} else {
		sock, port, token, err = p.open(req.EvenPort, req.ReservePair)
	}
	if err != nil {
		return nil, 0, err
	}
	if req.DontFragment {
		if err := sock.setDontFragment(p.bind.Is6()); err != nil {
			sock.close()
			p.release(port)
			return nil, 0, turn.ErrDontFragment
		}
	}
	r := &relay{sock: sock, port: port, addr: netip.AddrPortFrom(p.public, port), pool: p, alloc: a}
	if err := p.io.start(r); err != nil {
		sock.close()
		p.release(port)
		return nil, 0, err
	}
	return r, token, nil
}

// open binds a socket on a free port; with pair it also binds port+1 and
// holds it under a fresh reservation token.
func (p *relayPool) open(even, pair bool) (relaySocket, uint16, uint64, error) {
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
		sock, err := p.io.bind(port)
		if err != nil {
			continue // taken by another process: try the next one
		}
		var token uint64
		if pair {
			next, err := p.io.bind(port + 1)
			if err != nil {
				sock.close()
				continue
			}
			token = newToken()
			p.used[idx+1] = true
			p.reservations[token] = &reservation{sock: next, port: port + 1, expires: time.Now().Add(reservationLifetime)}
		}
		p.used[idx] = true
		return sock, port, token, nil
	}
	return relaySocket{}, 0, 0, turn.ErrNoCapacity
}

// claim takes the socket reserved under token.
func (p *relayPool) claim(token uint64) (relaySocket, uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.reservations[token]
	if !ok {
		return relaySocket{}, 0, turn.ErrNoCapacity
	}
	delete(p.reservations, token)
	return r.sock, r.port, nil
}

// sweep releases reservations nobody claimed in time.
func (p *relayPool) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, r := range p.reservations {
		if now.After(r.expires) {
			r.sock.close()
			if int(r.port-p.min) < len(p.used) {
				p.used[r.port-p.min] = false
			}
			delete(p.reservations, tok)
		}
	}
}

// release frees a port once its socket is closed. A port outside the
// range is one of a range replaced by reset.
func (p *relayPool) release(port uint16) {
	p.mu.Lock()
	if port >= p.min && int(port-p.min) < len(p.used) {
		p.used[port-p.min] = false
	}
	p.mu.Unlock()
}

// reset moves the pool to a new address and port range, for a relay
// config change. The caller has deleted every allocation first; relays
// still being closed release ports of the old range, which release ignores.
func (p *relayPool) reset(bind, public netip.Addr, min, max uint16) {
	if !public.IsValid() {
		public = bind
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, r := range p.reservations {
		r.sock.close()
		delete(p.reservations, tok)
	}
	p.bind, p.public, p.min, p.max = bind, public, min, max
	p.used = make([]bool, int(max)-int(min)+1)
}

// close stops the relay workers and closes reserved sockets.
func (p *relayPool) close() {
	p.mu.Lock()
	for tok, r := range p.reservations {
		r.sock.close()
		delete(p.reservations, tok)
	}
	p.mu.Unlock()
	p.io.close()
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
	sock   relaySocket
	port   uint16
	addr   netip.AddrPort
	pool   *relayPool
	alloc  *turn.Allocation
	closed atomic.Bool
	worker int // platform part: which relay worker serves it
}

// Addr implements turn.Relay.
func (r *relay) Addr() netip.AddrPort { return r.addr }

// Close implements turn.Relay: the socket is closed by the worker that
// serves it (so its descriptor is not reused while being read), then the
// port is freed.
func (r *relay) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.pool.io.stop(r)
	return nil
}
