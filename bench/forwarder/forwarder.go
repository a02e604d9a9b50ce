package forwarder

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/bench/udpbatch"
	"github.com/tern-gw/tern/internal/sysblock"
)

// batch is datagrams per recvmmsg/sendmmsg, as in the TURN servers measured.
const batch = 64

// Config describes a forwarder.
type Config struct {
	// Listen is the client-facing address.
	Listen netip.AddrPort
	// Threads is the number of SO_REUSEPORT listener sockets, each read by
	// its own goroutine. Default 2.
	Threads int
	// RelayIP is the address per-client relay sockets bind to.
	RelayIP netip.Addr
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF of every socket in bytes.
	SocketBuffer int
	// Poller makes the goroutines park in the Go netpoller. By default
	// each socket's goroutine blocks in recvmmsg in its own thread
	// (internal/sysblock), as ternd's workers do, so that the ceiling uses
	// the cheaper of the two ways to wait: a thread per relay socket where
	// ternd has a few epoll workers.
	Poller bool
}

// Forwarder is a running forwarder.
type Forwarder struct {
	cfg       Config
	listeners []*listener
	// relays maps a client address to its relay. It is replaced whole on
	// bind and unbind (rare) so that the data path reads it with one
	// atomic load and no lock, as a TURN server's allocation table should.
	relays atomic.Pointer[map[netip.AddrPort]*relay]
	mu     sync.Mutex // serializes writers of relays
	wg     sync.WaitGroup
}

type listener struct {
	conn *udpbatch.Conn
	ctl  *udpbatch.Conn // control replies, written by the listener goroutine
}

// listen opens one listener socket of c.
func listen(c Config) (*udpbatch.Conn, error) {
	return open(c.Listen, udpbatch.Options{ReusePort: true, Buffer: c.SocketBuffer}, c.Poller)
}

// listenRelay opens a relay socket on an ephemeral port of RelayIP.
func (f *Forwarder) listenRelay() (*udpbatch.Conn, error) {
	return open(netip.AddrPortFrom(f.cfg.RelayIP, 0), udpbatch.Options{Buffer: f.cfg.SocketBuffer}, f.cfg.Poller)
}

// open opens a socket that blocks in its reader's thread, or, with poller,
// one the Go netpoller serves. A blocking socket must stay out of the
// netpoller entirely: the netpoller is woken by every send on a socket it
// watches (the write-space edge), whether or not anyone waits there.
func open(addr netip.AddrPort, o udpbatch.Options, poller bool) (*udpbatch.Conn, error) {
	if !poller {
		return udpbatch.ListenBlocking(addr, o, batch)
	}
	uc, err := udpbatch.Listen(addr, o)
	if err != nil {
		return nil, err
	}
	return udpbatch.New(uc, batch)
}

// relay is one client's mapping: a socket that sends to the peer and
// whose replies go back to the client.
type relay struct {
	client netip.AddrPort
	peer   netip.AddrPort
	conn   *udpbatch.Conn // reads from the peer; written by the listener goroutines
	wmu    sync.Mutex     // a client hashes to one listener, but do not rely on it
	back   *udpbatch.Conn // this relay's own writer on the listener socket
}

// Start opens the listeners and serves until Close.
func Start(c Config) (*Forwarder, error) {
	if c.Threads < 1 {
		c.Threads = 2
	}
	f := &Forwarder{cfg: c}
	empty := map[netip.AddrPort]*relay{}
	f.relays.Store(&empty)
	for i := 0; i < c.Threads; i++ {
		bc, err := listen(c)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("forwarder: listener %d: %w", i, err)
		}
		if i == 0 && c.Listen.Port() == 0 {
			// Port 0: the other sockets join the port the first one got.
			c.Listen = bc.LocalAddr()
			f.cfg.Listen = c.Listen
		}
		l := &listener{conn: bc, ctl: bc.Writer(1)}
		f.listeners = append(f.listeners, l)
	}
	for _, l := range f.listeners {
		f.wg.Add(1)
		go f.serveListener(l)
	}
	return f, nil
}

// Addr is the client-facing address.
func (f *Forwarder) Addr() netip.AddrPort { return f.cfg.Listen }

// Close stops the forwarder and closes every socket.
func (f *Forwarder) Close() error {
	for _, l := range f.listeners {
		l.conn.Close()
	}
	f.mu.Lock()
	for _, r := range *f.relays.Load() {
		r.conn.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// Relays is the number of bound clients.
func (f *Forwarder) Relays() int { return len(*f.relays.Load()) }

func (f *Forwarder) serveListener(l *listener) {
	defer f.wg.Done()
	var y sysblock.Yielder
	if !f.cfg.Poller {
		defer sysblock.Enter()()
	}
	in := make([]udpbatch.Message, batch)
	out := make([]udpbatch.Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	for {
		if !f.cfg.Poller {
			y.Maybe()
		}
		n, err := l.conn.ReadBatch(in)
		if err != nil {
			return
		}
		table := *f.relays.Load()
		// Forward runs of consecutive datagrams of one client with one
		// sendmmsg; load generators send per-client bursts, so runs are long.
		var cur *relay
		k := 0
		flush := func() {
			if cur != nil && k > 0 {
				cur.wmu.Lock()
				_, _ = cur.conn.WriteBatch(out[:k])
				cur.wmu.Unlock()
			}
			k = 0
		}
		for i := range in[:n] {
			m := &in[i]
			if op, addr, ok := ParseControl(m.Buf[:m.N]); ok {
				flush()
				cur = nil
				f.control(l, m.Addr, op, addr)
				table = *f.relays.Load()
				continue
			}
			r := table[m.Addr]
			if r == nil {
				continue // not bound: drop, as a TURN server drops data without an allocation
			}
			if r != cur {
				flush()
				cur = r
			}
			out[k] = udpbatch.Message{Buf: m.Buf[:m.N], Addr: r.peer}
			k++
		}
		flush()
	}
}

func (f *Forwarder) control(l *listener, client netip.AddrPort, op byte, addr netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := *f.relays.Load()
	r := old[client]
	switch op {
	case OpBind:
		if r != nil && r.peer != addr {
			// A relay's peer is immutable (the data path reads it without a
			// lock): rebinding to another peer replaces the relay.
			r.conn.Close()
			r = nil
		}
		if r == nil {
			rc, err := f.listenRelay()
			if err != nil {
				return // the client times out and reports the failure
			}
			back := l.conn.Writer(batch)
			r = &relay{client: client, peer: addr, conn: rc, back: back}
			f.wg.Add(1)
			go f.serveRelay(r)
		}
		next := make(map[netip.AddrPort]*relay, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[client] = r
		f.relays.Store(&next)
		relayAddr := r.conn.LocalAddr()
		_, _ = l.ctl.WriteBatch([]udpbatch.Message{{Buf: Control(OpBind, relayAddr), Addr: client}})
	case OpUnbind:
		if r == nil {
			return
		}
		next := make(map[netip.AddrPort]*relay, len(old))
		for k, v := range old {
			if k != client {
				next[k] = v
			}
		}
		f.relays.Store(&next)
		r.conn.Close()
	}
}

// serveRelay sends what the peer returns back to the client, from the
// listener socket so the client sees the forwarder's address.
func (f *Forwarder) serveRelay(r *relay) {
	defer f.wg.Done()
	var y sysblock.Yielder
	if !f.cfg.Poller {
		defer sysblock.Enter()()
	}
	in := make([]udpbatch.Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	for {
		if !f.cfg.Poller {
			y.Maybe()
		}
		n, err := r.conn.ReadBatch(in)
		if err != nil {
			return
		}
		for i := range in[:n] {
			in[i].Buf, in[i].Addr = in[i].Buf[:in[i].N], r.client
		}
		_, _ = r.back.WriteBatch(in[:n])
		for i := range in[:n] {
			in[i].Buf = in[i].Buf[:cap(in[i].Buf)]
		}
	}
}
