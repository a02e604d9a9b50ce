// Package relay opens and serves relay sockets: the relayed transport
// addresses of allocations (RFC 8656 §2.2). Pool implements the engine's
// turn.RelayAllocator, picking a free port of the configured range on one of
// the relay addresses; a few epoll workers read every relay socket, frame
// what peers send with the engine (turn.Engine.HandlePeer) and deliver it to
// the allocation's client through its Client.
package relay

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
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// maxPeerPayload is the largest peer datagram relayed, in bytes; larger ones
// are dropped rather than truncated. WebRTC media stays under ~1200 bytes.
const maxPeerPayload = 8192

// Options are the process-level settings of relay workers.
type Options struct {
	// Workers is the number of workers serving relay sockets; at least 1.
	Workers int
	// Mode is how workers wait: blocked in epoll_wait in a thread each, or
	// parked in the Go netpoller.
	Mode udpio.Mode
	// GSO sends runs of same-size datagrams to one client as one
	// UDP_SEGMENT message where the kernel supports it.
	GSO bool
	// Linger is how long a relay worker (threads mode) sleeps between
	// polls while datagrams arrive closer together than that, instead of
	// waking for each (sysblock.Linger); 0 wakes for each.
	Linger time.Duration
	// NoCounters leaves the packet and byte counters alone (see
	// listener.Env.NoCounters).
	NoCounters bool
}

// Client is where a relay worker delivers what peers send to an
// allocation's client. It is the allocation's turn.Transport: the
// dataplane's listeners implement it, and the pool looks it up once per
// allocation, so the packet path makes no type assertion.
type Client interface {
	// BatchSocket returns the UDP socket relay worker w sends this client's
	// messages on, batched with others, and the counters to count them in.
	// ok is false for connection transports, which take WriteToClient.
	BatchSocket(w int) (fd int, st *stats.Worker, ok bool)
	// WriteToClient sends one framed message to the client. It must copy
	// msg (the worker reuses the buffer) and must not block.
	WriteToClient(msg []byte)
	// QueueToClient queues one framed message for the client on behalf of
	// relay worker w (0 <= w < Pool.Workers), copying msg, without
	// blocking, so that what one wake-up of the worker yields for a client
	// leaves together: one write of a TCP connection, one TLS record, one
	// sendmmsg of DTLS records. It reports true when the message opened a
	// queue that worker w must flush (FlushToClient(w)) once its wake-up is
	// over; false when a flush is already owed or the message went out.
	QueueToClient(w int, msg []byte) bool
	// FlushToClient sends what worker w queued through QueueToClient.
	FlushToClient(w int)
}

// DestinationSource is implemented by a UDP listener Client on a wildcard
// address: FromDestination reports true when what relay workers batch for
// its clients (BatchSocket) must name the server address of the
// allocation's 5-tuple as its source, because the socket's own address
// (0.0.0.0 or ::) leaves the kernel to pick one by route, which a client
// that connect()ed its socket to the server drops (udpio.SetPacketInfo).
type DestinationSource interface {
	FromDestination() bool
}

// Pool opens relay sockets on its addresses within a port range and
// implements turn.RelayAllocator. The socket work is platform-specific
// (worker_linux.go: non-blocking sockets served by epoll workers).
type Pool struct {
	opts   Options
	engine *turn.Engine
	io     *relayIO // platform part: socket creation and serving

	mu           sync.Mutex
	addrs        []*Addr
	next         int // the address the next allocation tries first
	reservations map[uint64]*reservation
}

// Addr is one address relay sockets bind to and its ports in use. A reset
// replaces the pool's Addrs: relays still closing then release into tables
// nobody reads any more.
type Addr struct {
	bind   netip.Addr // address relay sockets bind to
	public netip.Addr // address advertised in XOR-RELAYED-ADDRESS
	min    uint16     // first port of the range
	used   []bool     // indexed by port-min
}

type reservation struct {
	sock    relaySocket
	addr    *Addr
	port    uint16
	expires time.Time
	// Who reserved the port: only an Allocate from the same client IP with
	// the same USERNAME may claim it, so a token seen on the wire (or
	// guessed) does not hand the port to someone else.
	client netip.Addr
	user   string
}

// ParseAddrs returns the relay addresses of r, each with a port table for
// its range minPort-maxPort, or an error naming the field that does not
// parse.
func ParseAddrs(r config.Relay) ([]*Addr, error) {
	all := append([]config.RelayAddress{{Address: r.Address, PublicAddress: r.PublicAddress}}, r.ExtraAddresses...)
	var out []*Addr
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
		out = append(out, &Addr{bind: bind, public: public, min: uint16(r.MinPort), used: make([]bool, r.MaxPort-r.MinPort+1)})
	}
	return out, nil
}

// NewPool returns a pool for the relay config r, with its workers created
// but not yet serving (Start). It returns an error naming a relay address
// that does not parse, or the system call that failed.
func NewPool(r config.Relay, o Options) (*Pool, error) {
	addrs, err := ParseAddrs(r)
	if err != nil {
		return nil, err
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	p := &Pool{opts: o, addrs: addrs, reservations: map[uint64]*reservation{}}
	p.io, err = newRelayIO(p)
	return p, err
}

// Start lets the workers serve relay sockets, framing peer data with eng.
// The engine is built with the pool as its RelayAllocator, so it comes
// after NewPool; no relay exists before the engine asks for one.
func (p *Pool) Start(eng *turn.Engine) {
	p.engine = eng
	p.io.run()
}

// Workers returns the number of relay workers, for per-worker counters
// kept by Clients.
func (p *Pool) Workers() int { return p.io.workers() }

// FoldStats adds the workers' counters (datagrams from peers, drops) to sum.
func (p *Pool) FoldStats(sum *stats.Sum) { p.io.foldStats(sum) }

// RelayCost returns the bytes of Go heap one relay socket holds, for the
// engine's state budget (turn.Config.RelayCost): its Relay (128 bytes),
// its slots in the descriptor tables of the relay workers, each of which
// grows by doubling to hold every descriptor up to the highest it serves
// (up to 16 bytes a descriptor, per worker), and 32 bytes of slack:
// TestRelayCost measured 158-163 bytes with 2 workers. The socket's kernel
// memory is not included.
func (p *Pool) RelayCost() int64 { return 128 + 32 + 16*int64(p.io.workers()) }

// OwnAddrs returns the addresses relays bind to and advertise.
func (p *Pool) OwnAddrs() []netip.Addr {
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
// relaying from it. A request that names no family (req.Default) takes an
// IPv4 address, or an IPv6 one when the pool has no IPv4 address. It
// returns turn.ErrAddressFamily when no relay address has the family and
// turn.ErrNoCapacity when every port is taken.
func (p *Pool) Allocate(a *turn.Allocation, req turn.RelayRequest) (turn.Relay, uint64, error) {
	client, _ := a.Transport.(Client)
	if client == nil {
		return nil, 0, fmt.Errorf("relay: transport %T cannot take relayed data", a.Transport)
	}
	var (
		sock  relaySocket
		ra    *Addr
		port  uint16
		token uint64
		err   error
	)
	owner := reservation{client: req.Client.Client.Addr().Unmap(), user: req.Username}
	if req.Token != 0 {
		sock, ra, port, err = p.claim(req.Token, owner)
	} else {
		sock, ra, port, token, err = p.open(req.IPv6, req.EvenPort, req.ReservePair, owner)
		if err == turn.ErrAddressFamily && req.Default && !req.IPv6 {
			// No IPv4 relay address and the client named no family:
			// IPv6 (turn.RelayRequest.Default).
			sock, ra, port, token, err = p.open(true, req.EvenPort, req.ReservePair, owner)
		}
	}
	if err != nil {
		return nil, 0, err
	}
	r := &Relay{sock: sock, ra: ra, port: port, addr: netip.AddrPortFrom(ra.public, port), pool: p, alloc: a, client: client}
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
// pair it also binds port+1 and holds it for owner under a fresh
// reservation token.
func (p *Pool) open(v6, even, pair bool, owner reservation) (relaySocket, *Addr, uint16, uint64, error) {
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
		sock, port, token, ok := p.openOn(ra, even, pair, owner)
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
func (p *Pool) openOn(ra *Addr, even, pair bool, owner reservation) (relaySocket, uint16, uint64, bool) {
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
			owner.sock, owner.addr, owner.port = next, ra, port+1
			owner.expires = time.Now().Add(turn.ReservationLifetime)
			p.reservations[token] = &owner
		}
		ra.used[idx] = true
		return sock, port, token, true
	}
	return relaySocket{}, 0, 0, false
}

// claim takes the socket reserved under token, if by owner's client IP
// and username; for anyone else the token is as unknown (ErrNoCapacity),
// and the reservation stays for its owner.
func (p *Pool) claim(token uint64, owner reservation) (relaySocket, *Addr, uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.reservations[token]
	if !ok || r.client != owner.client || r.user != owner.user {
		return relaySocket{}, nil, 0, turn.ErrNoCapacity
	}
	delete(p.reservations, token)
	return r.sock, r.addr, r.port, nil
}

// Pause stops the relay workers reading relay sockets, for a hand-over:
// what peers send meanwhile waits in the sockets' kernel buffers. It
// returns once every worker has stopped. Relays closed meanwhile are
// closed on Resume.
func (p *Pool) Pause() { p.io.pause() }

// Resume lets the relay workers read again.
func (p *Pool) Resume() { p.io.resume() }

// Detach takes tr, a relay of this pool, out of service at once, for a
// hand-over whose successor now reads the same socket: its worker stops
// watching it, this process's descriptor of it is closed (the successor's
// stays open) and its port is released here; tr.Close does nothing
// afterwards. It must be called while the pool is paused (Pause), so that
// no worker is reading the socket. Relays of other pools are ignored.
func (p *Pool) Detach(tr turn.Relay) {
	r, ok := tr.(*Relay)
	if !ok || r.pool != p || !r.closed.CompareAndSwap(false, true) {
		return
	}
	p.io.detach(r)
}

// Adopt implements the relay side of turn.Engine.Import: it serves fd, a
// relay socket that the process handing over bound at relayed transport
// address addr, as a's relay, on the pool's address of that public IP
// whose port range holds the port. It returns an error when no relay
// address of the pool (the config's relay section) matches, the port is
// in use, or fd is not a UDP socket bound there; fd is then left open.
func (p *Pool) Adopt(a *turn.Allocation, fd int, addr netip.AddrPort) (turn.Relay, error) {
	client, _ := a.Transport.(Client)
	if client == nil {
		return nil, fmt.Errorf("relay: transport %T cannot take relayed data", a.Transport)
	}
	sock, local, err := p.io.adoptSocket(fd)
	if err != nil {
		return nil, fmt.Errorf("relay socket for %s: %w", addr, err)
	}
	if local.Port() != addr.Port() {
		return nil, fmt.Errorf("relay socket for %s is bound to %s", addr, local)
	}
	p.mu.Lock()
	var ra *Addr
	for _, c := range p.addrs {
		i := int(addr.Port()) - int(c.min)
		if c.public == addr.Addr() && c.bind == local.Addr() && i >= 0 && i < len(c.used) && !c.used[i] {
			ra = c
			c.used[i] = true
			break
		}
	}
	p.mu.Unlock()
	if ra == nil {
		return nil, fmt.Errorf("relay socket %s (bound to %s): no free port of that address in the relay config", addr, local)
	}
	r := &Relay{sock: sock, ra: ra, port: addr.Port(), addr: addr, pool: p, alloc: a, client: client}
	if err := p.io.start(r); err != nil {
		p.release(r)
		return nil, err
	}
	return r, nil
}

// Sweep releases reservations nobody claimed in time; now is the time of
// the sweep.
func (p *Pool) Sweep(now time.Time) {
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
func (p *Pool) release(r *Relay) {
	p.mu.Lock()
	r.ra.used[r.port-r.ra.min] = false
	p.mu.Unlock()
}

// Reset moves the pool to addrs (from ParseAddrs), for a relay config
// change. The caller has deleted every allocation first.
func (p *Pool) Reset(addrs []*Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, res := range p.reservations {
		res.sock.close()
		delete(p.reservations, tok)
	}
	p.addrs, p.next = addrs, 0
}

// Close stops the relay workers, closing the sockets they serve, and closes
// reserved sockets.
func (p *Pool) Close() {
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
			panic(fmt.Sprintf("relay: no randomness: %v", err))
		}
		if t := binary.BigEndian.Uint64(b[:]); t != 0 {
			return t
		}
	}
}

// Relay is one allocation's relay socket (turn.Relay).
type Relay struct {
	sock   relaySocket
	ra     *Addr // the address it is bound on
	port   uint16
	addr   netip.AddrPort
	pool   *Pool
	alloc  *turn.Allocation
	client Client
	closed atomic.Bool
	// Set when a worker takes the relay: which worker serves it and, for a
	// UDP client, the listener socket that worker sends on.
	worker int
	batch  bool
	// fromDest is set when what is batched for the client must leave from
	// the server address of the allocation's 5-tuple (DestinationSource).
	// A flag, not the address: it packs beside batch, and keeps a Relay
	// in its 128-byte size class (RelayCost).
	fromDest bool
	outFD    int
	outStats *stats.Worker
}

// Addr implements turn.Relay: the relayed transport address.
func (r *Relay) Addr() netip.AddrPort { return r.addr }

// Socket implements turn.Relay: the relay socket's descriptor, which
// listeners send relayed payloads from.
func (r *Relay) Socket() int { return r.sock.fd }

// Close implements turn.Relay: the socket is closed by the worker that
// serves it (so its descriptor is not reused while being read), then the
// port is freed.
func (r *Relay) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.pool.io.stop(r)
	return nil
}
