package bench

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/forwarder"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/bench/udpbatch"
)

// KindDirect is the baseline of the flows tests: no server at all, the
// generator's clients and the peer talk straight to each other, so that
// its whole-machine CPU is the generator's and the peer's alone.
const KindDirect Kind = "direct"

// flowChannel is the channel every flow binds to its peer.
const flowChannel = 0x4000

// clientsPerIP is how many flows share one client address: ternd's default
// quotas allow 500 TURN-TCP/TLS connections per client IP, so thousands of
// flows come from several 127.0.97.x addresses as real clients would.
const clientsPerIP = 200

// flowConn is one flow's client: its own transport to the server (or, for
// KindDirect, to the peer), an allocation with a channel bound to the peer,
// and where the peer reaches it (its relayed address).
type flowConn struct {
	tr      turnclient.Transport
	batch   *udpbatch.Conn // UDP transports only: burst sends, batched reads
	tc      *turnclient.Client
	turn    bool           // frames carry ChannelData (not raw payloads)
	relayed netip.AddrPort // the address the peer sends this flow's downstream to
	dst     netip.AddrPort // where the client sends: the server, or the peer
}

// clientAddr is the local address of flow i: 127.0.97.1 and up, clientsPerIP
// flows each, port 0.
func clientAddr(i int) netip.AddrPort {
	n := 1 + i/clientsPerIP
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(97 + n/250), byte(1 + n%250)}), 0)
}

// openFlow sets up flow i of t over transport p relaying to peer.
func openFlow(t Target, i int, p turnclient.Proto, peer netip.AddrPort, resends *atomic.Uint64) (*flowConn, error) {
	server := t.Addr
	switch t.Kind {
	case KindDirect:
		server, p = peer, turnclient.UDP
	case KindRaw:
		if p != turnclient.UDP {
			return nil, fmt.Errorf("%s: the raw forwarder is UDP only", t.Name)
		}
	default:
		a, ok := t.AddrFor(p)
		if !ok {
			return nil, fmt.Errorf("%s: no %s listener", t.Name, p)
		}
		server = a
	}
	var tr turnclient.Transport
	err := inClientNS(func() (err error) {
		tr, err = turnclient.Dial(p, flowClientAddr(i), server, 5*time.Second)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	f := &flowConn{tr: tr, dst: server}
	if uc := turnclient.UDPConn(tr); uc != nil {
		_ = uc.SetReadBuffer(1 << 20)
		_ = uc.SetWriteBuffer(1 << 20)
		if f.batch, err = udpbatch.New(uc, batchSize); err != nil {
			tr.Close()
			return nil, err
		}
	}
	switch t.Kind {
	case KindDirect:
		f.relayed = tr.LocalAddr()
	case KindRaw:
		f.relayed, err = rawBindOver(tr, peer)
	default:
		f.turn = true
		f.tc = turnclient.NewOver(tr, t.Creds)
		if f.relayed, err = f.tc.Allocate(0); err == nil {
			if err = f.tc.ChannelBind(peer, flowChannel); err != nil {
				_ = f.tc.Refresh(0)
			}
		}
		resends.Add(uint64(f.tc.Resends))
		f.tc.Resends = 0
	}
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("%s over %s: %w", t.Name, p, err)
	}
	return f, nil
}

// rawBindOver binds a forwarder mapping to peer and returns the relay
// socket's address from the reply.
func rawBindOver(tr turnclient.Transport, peer netip.AddrPort) (netip.AddrPort, error) {
	buf := make([]byte, 64)
	defer tr.SetReadDeadline(time.Time{})
	for try := 0; try < 4; try++ {
		if err := tr.WriteMsg(forwarder.Control(forwarder.OpBind, peer)); err != nil {
			return netip.AddrPort{}, err
		}
		_ = tr.SetReadDeadline(time.Now().Add(250 * time.Millisecond << try))
		for {
			n, err := tr.ReadMsg(buf)
			if err != nil {
				break
			}
			if op, relay, ok := forwarder.ParseControl(buf[:n]); ok && op == forwarder.OpBind {
				return relay, nil
			}
		}
	}
	return netip.AddrPort{}, errors.New("forwarder: no bind reply")
}

// frame wraps payload for the flow's transport: ChannelData (padded on a
// stream) for TURN, the payload itself otherwise. The payload starts at 4
// or 0, the returned offset.
func (f *flowConn) frame(payload []byte) ([]byte, int) {
	if !f.turn {
		return append([]byte(nil), payload...), 0
	}
	fr := turnclient.ChannelData(flowChannel, payload)
	if f.tr.Stream() {
		fr = turnclient.PadChannelData(fr)
	}
	return fr, 4
}

// stopReading makes a blocked read return.
func (f *flowConn) stopReading() { _ = f.tr.SetReadDeadline(time.Unix(1, 0)) }

// close releases the allocation (or mapping) and the transport, adding
// the requests it sent again to resends.
func (f *flowConn) close(t Target, resends *atomic.Uint64) {
	_ = f.tr.SetReadDeadline(time.Time{})
	switch {
	case f.tc != nil:
		f.tc.Retries = 2
		_ = f.tc.Refresh(0)
		resends.Add(uint64(f.tc.Resends))
	case t.Kind == KindRaw:
		_ = f.tr.WriteMsg(forwarder.Control(forwarder.OpUnbind, netip.AddrPort{}))
	}
	f.tr.Close()
}

// openFlows opens n flows in parallel; on error the ones opened are
// closed. Every request the clients sent again, on success or not, is
// added to resends.
func openFlows(t Target, n int, p turnclient.Proto, peer netip.AddrPort, resends *atomic.Uint64) ([]*flowConn, error) {
	fs := make([]*flowConn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range fs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			fs[i], errs[i] = openFlow(t, i, p, peer, resends)
			<-sem
		}()
	}
	wg.Wait()
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		closeFlows(t, fs, resends)
		return nil, fmt.Errorf("%d of %d flows failed setup, first: %w", failed, n, first)
	}
	return fs, nil
}

func closeFlows(t Target, fs []*flowConn, resends *atomic.Uint64) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, f := range fs {
		if f == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); f.close(t, resends); <-sem }()
	}
	wg.Wait()
}
