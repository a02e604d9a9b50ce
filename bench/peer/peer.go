// Package peer is the far end of every relay ternbench measures: a UDP
// socket that counts what arrives (a sink, for one-way throughput) and,
// when asked, sends each datagram back to where it came from (an echo, for
// round trips). It reads and writes in batches so that it is never the
// bottleneck of a step.
package peer

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/bench/udpbatch"
)

// batch is datagrams per recvmmsg/sendmmsg.
const batch = 64

// Peer is a running sink or echo peer.
type Peer struct {
	conn    *udpbatch.Conn
	addr    netip.AddrPort
	echo    bool
	packets atomic.Uint64
	bytes   atomic.Uint64
	done    sync.WaitGroup
}

// Start binds addr (port 0 picks one) and serves until Close. buffer is
// SO_RCVBUF/SO_SNDBUF in bytes.
func Start(addr netip.AddrPort, echo bool, buffer int) (*Peer, error) {
	uc, err := udpbatch.Listen(addr, udpbatch.Options{Buffer: buffer})
	if err != nil {
		return nil, err
	}
	c, err := udpbatch.New(uc, batch)
	if err != nil {
		uc.Close()
		return nil, err
	}
	p := &Peer{conn: c, addr: uc.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort(), echo: echo}
	p.done.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the peer's address, the XOR-PEER-ADDRESS clients bind to.
func (p *Peer) Addr() netip.AddrPort { return p.addr }

// Packets is the number of datagrams received so far.
func (p *Peer) Packets() uint64 { return p.packets.Load() }

// Bytes is the number of payload bytes received so far.
func (p *Peer) Bytes() uint64 { return p.bytes.Load() }

// Close stops the peer.
func (p *Peer) Close() error {
	err := p.conn.Close()
	p.done.Wait()
	return err
}

func (p *Peer) serve() {
	defer p.done.Done()
	in := make([]udpbatch.Message, batch)
	out := make([]udpbatch.Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	for {
		n, err := p.conn.ReadBatch(in)
		if err != nil {
			return
		}
		var b uint64
		for i := range in[:n] {
			b += uint64(in[i].N)
			out[i] = udpbatch.Message{Buf: in[i].Buf[:in[i].N], Addr: in[i].Addr}
		}
		p.packets.Add(uint64(n))
		p.bytes.Add(b)
		if p.echo {
			// A failed echo is loss the step reports; nothing to retry.
			_, _ = p.conn.WriteBatch(out[:n])
		}
	}
}
