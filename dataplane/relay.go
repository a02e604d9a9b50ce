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

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// reservationLifetime is how long a port reserved by EVEN-PORT with the R
// bit waits for the Allocate that claims it (RFC 8656 §14.9 suggests 30 s).
const reservationLifetime = 30 * time.Second

// maxPeerPayload is the largest peer datagram relayed, in bytes; larger ones
// are dropped rather than truncated. WebRTC media stays under ~1200 bytes.
const maxPeerPayload = 8192

// relayPool opens relay sockets on its addresses within a port range and
// implements turn.RelayAllocator. The socket work is platform-specific
// (relay_linux.go: non-blocking sockets served by epoll workers).
type relayPool struct {
	srv *Server
	io  *relayIO // platform part: socket creation and serving

	mu           sync.Mutex
	addrs        []*relayAddr
	next         int // the address the next allocation tries first
	reservations map[uint64]*reservation
}

// relayAddr is one address relay sockets bind to and its ports in use. A
// reset replaces the pool's relayAddrs: relays still closing then release
// into tables nobody reads any more.
type relayAddr struct {
	bind   netip.Addr // address relay sockets bind to
	public netip.Addr // address advertised in XOR-RELAYED-ADDRESS
	min    uint16     // first port of the range
	used   []bool     // indexed by port-min
}

type reservation struct {
	sock    relaySocket
	addr    *relayAddr
	port    uint16
	expires time.Time
}

// relayAddrs returns the relay addresses of r, each with a port table for
// the range min-max.
func relayAddrs(r config.Relay) ([]*relayAddr, error) {
	all := append([]config.RelayAddress{{Address: r.Address, PublicAddress: r.PublicAddress}}, r.ExtraAddresses...)
	var out []*relayAddr
	for i, ra := range all {
		field := "relay"
		if i > 0 {
			field = fmt.Sprintf("relay.extraAddresses[%d]", i-1)
		}
		bind, err := netip.ParseAddr(ra.Address)
		if err != nil {
			return nil, fmt.Errorf("%s.address: %w", field, err)
		}
		public := bind
		if ra.PublicAddress != "" {
			if public, err = netip.ParseAddr(ra.PublicAddress); err != nil {
				return nil, fmt.Errorf("%s.publicAddress: %w", field, err)
			}
		}
		out = append(out, &relayAddr{bind: bind, public: public, min: uint16(r.MinPort), used: make([]bool, r.MaxPort-r.MinPort+1)})
	}
	return out, nil
}

func newRelayPool(srv *Server, r config.Relay) (*relayPool, error) {
	addrs, err := relayAddrs(r)
	if err != nil {
		return nil, err
	}
	p := &relayPool{srv: srv, addrs: addrs, reservations: map[uint64]*reservation{}}
	p.io, err = newRelayIO(p)
	return p, err
}

// ownAddrs returns the addresses relays bind to and advertise.
func (p *relayPool) ownAddrs() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	var own []netip.Addr
	for _, a := range p.addrs {
		own = append(own, a.bind, a.public)
	}
	return own
}

// Allocate implements turn.RelayAllocator: it binds a UDP socket on a free
// port of the range, on the next address of the requested family that has
// one (an even port, and reserves the next, when asked), and starts
// relaying from it. It returns turn.ErrAddressFamily when no relay address
// has the family and turn.ErrNoCapacity when every port is taken.
func (p *relayPool) Allocate(a *turn.Allocation, req turn.RelayRequest) (turn.Relay, uint64, error) {
	var (
		sock  relaySocket
		ra    *relayAddr
		port  uint16
		token uint64
		err   error
	)
	if req.Token != 0 {
		sock, ra, port, err = p.claim(req.Token)
	} else {
		sock, ra, port, token, err = p.open(req.IPv6, req.EvenPort, req.ReservePair)
	}
	if err != nil {
		return nil, 0, err
	}
	r := &relay{sock: sock, ra: ra, port: port, addr: netip.AddrPortFrom(ra.public, port), pool: p, alloc: a}
	if req.DontFragment {
		if err := sock.setDontFragment(ra.bind.Is6()); err != nil {
			sock.close()
			p.release(r)
			return nil, 0, turn.ErrDontFragment
		}
	}
	if err := p.io.start(r); err != nil {
		sock.close()
		p.release(r)
		return nil, 0, err
	}
	return r, token, nil
}

// open binds a socket on a free port of an address of the family; with
// pair it also binds port+1 and holds it under a fresh reservation token.
func (p *relayPool) open(v6, even, pair bool) (relaySocket, *relayAddr, uint16, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	family := false
	for k := range p.addrs {
		ai := (p.next + k) % len(p.addrs)
		ra := p.addrs[ai]
		if ra.bind.Is6() != v6 {
			continue
		}
		family = true
		sock, port, token, ok := p.openOn(ra, even, pair)
		if ok {
			p.next = ai + 1
			return sock, ra, port, token, nil
		}
	}
	if !family {
		return relaySocket{}, nil, 0, 0, turn.ErrAddressFamily
	}
	return relaySocket{}, nil, 0, 0, turn.ErrNoCapacity
}

// openOn is open on one address. The caller holds p.mu.
func (p *relayPool) openOn(ra *relayAddr, even, pair bool) (relaySocket, uint16, uint64, bool) {
	n := len(ra.used)
	start := rand.IntN(n)
	for i := 0; i < n; i++ {
		idx := (start + i) % n
		port := ra.min + uint16(idx)
		if ra.used[idx] || (even && port%2 != 0) {
			continue
		}
		if pair && (idx+1 >= n || ra.used[idx+1]) {
			continue
		}
		sock, err := p.io.bind(ra.bind, port)
		if err != nil {
			continue // taken by another process: try the next one
		}
		var token uint64
		if pair {
			next, err := p.io.bind(ra.bind, port+1)
			if err != nil {
				sock.close()
				continue
			}
			token = newToken()
			ra.used[idx+1] = true
			p.reservations[token] = &reservation{sock: next, addr: ra, port: port + 1, expires: time.Now().Add(reservationLifetime)}
		}
		ra.used[idx] = true
		return sock, port, token, true
	}
	return relaySocket{}, 0, 0, false
}

// claim takes the socket reserved under token.
func (p *relayPool) claim(token uint64) (relaySocket, *relayAddr, uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.reservations[token]
	if !ok {
		return relaySocket{}, nil, 0, turn.ErrNoCapacity
	}
	delete(p.reservations, token)
	return r.sock, r.addr, r.port, nil
}

// sweep releases reservations nobody claimed in time.
func (p *relayPool) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, r := range p.reservations {
		if now.After(r.expires) {
			r.sock.close()
			r.addr.used[r.port-r.addr.min] = false
			delete(p.reservations, tok)
		}
	}
}

// release frees r's port once its socket is closed.
func (p *relayPool) release(r *relay) {
	p.mu.Lock()
	r.ra.used[r.port-r.ra.min] = false
	p.mu.Unlock()
}

// reset moves the pool to addrs (from relayAddrs), for a relay config
// change. The caller has deleted every allocation first.
func (p *relayPool) reset(addrs []*relayAddr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, res := range p.reservations {
		res.sock.close()
		delete(p.reservations, tok)
	}
	p.addrs, p.next = addrs, 0
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
	ra     *relayAddr // the address it is bound on
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
