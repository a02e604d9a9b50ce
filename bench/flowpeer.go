package bench

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/bench/udpbatch"
)

// noRTT marks, in the high bit of a stamp's sequence number, a downstream
// packet the peer made up (the webrtc profile's extra downstream copies),
// which the clients count but take no round-trip time from.
const noRTT = 1 << 63

// flowPeer is the far end of the flows tests: one UDP socket that counts
// what arrives and, as configured, echoes every datagram back to where it
// came from with extra-1 more copies (marked noRTT), or sends downstream to
// the flows' relayed addresses on the generator's schedule (sendTo).
type flowPeer struct {
	conn   *udpbatch.Conn
	addr   netip.AddrPort
	copies int  // datagrams sent back per datagram received; 0: a sink
	gro    bool // a sink reading with UDP_GRO: count Message.Segs
	got    atomic.Uint64
	sent   atomic.Uint64
	wg     sync.WaitGroup
}

// groReads is how many messages a GRO sink reads per call, each into a
// 64 KiB buffer that holds the longest run the kernel joins.
const groReads = 16

// startFlowPeer binds addr (port 0 picks one) with 4 MiB buffers. A sink
// (copies 0) with gro counts with UDP GRO on (udpbatch.EnableGRO): a run
// of datagrams the kernel joined is one read and as many counted, so the
// sink's cost per datagram falls with the length of the runs.
func startFlowPeer(addr netip.AddrPort, copies int, gro bool) (*flowPeer, error) {
	uc, err := udpbatch.Listen(addr, udpbatch.Options{Buffer: sockBuf})
	if err != nil {
		return nil, err
	}
	c, err := udpbatch.New(uc, batchSize)
	if err != nil {
		uc.Close()
		return nil, err
	}
	p := &flowPeer{conn: c, addr: uc.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort(), copies: copies}
	if gro && copies == 0 {
		if err := c.EnableGRO(); err != nil {
			c.Close()
			return nil, fmt.Errorf("sink: UDP_GRO: %w", err)
		}
		p.gro = true
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *flowPeer) close() { p.conn.Close(); p.wg.Wait() }

func (p *flowPeer) serve() {
	defer p.wg.Done()
	if p.gro {
		p.count()
		return
	}
	in := make([]udpbatch.Message, batchSize)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	k := max(p.copies, 1)
	out := make([]udpbatch.Message, 0, batchSize*k)
	extra := make([][]byte, batchSize*k)
	for i := range extra {
		extra[i] = make([]byte, 2048)
	}
	for {
		n, err := p.conn.ReadBatch(in)
		if err != nil {
			return
		}
		p.got.Add(uint64(n))
		if p.copies == 0 {
			continue
		}
		out = out[:0]
		for i, m := range in[:n] {
			b := m.Buf[:m.N]
			out = append(out, udpbatch.Message{Buf: b, Addr: m.Addr})
			for c := 1; c < p.copies; c++ {
				e := extra[i*k+c][:m.N]
				copy(e, b)
				if len(e) >= stampLen {
					e[0] |= 0x80
				}
				out = append(out, udpbatch.Message{Buf: e, Addr: m.Addr})
			}
		}
		// A failed send is loss the step reports; nothing to retry.
		sent, _ := p.conn.WriteBatch(out)
		p.sent.Add(uint64(sent))
	}
}

// count is a GRO sink's loop: it counts every datagram of every message.
func (p *flowPeer) count() {
	in := make([]udpbatch.Message, groReads)
	for i := range in {
		in[i].Buf = make([]byte, 64<<10)
	}
	for {
		n, err := p.conn.ReadBatch(in)
		if err != nil {
			return
		}
		segs := 0
		for _, m := range in[:n] {
			segs += m.Segs
		}
		p.got.Add(uint64(segs))
	}
}
