package turn

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

// benchChannelCounts are the allocation sizes the channel benchmarks run
// at: a typical call, a large SFU fan-out, and the whole RFC 8656 range.
var benchChannelCounts = []int{16, 256, 4096}

// benchPeer is the peer of the i-th channel: the 256 IPs of the allowed
// 198.51.100.0/24 on port 5000, then on 5001-5015 (testListener allows only
// 5000-5999 of 198.51.100.200), so that permissions grow with the channels
// up to 256.
func benchPeer(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), uint16(5000+i/256))
}

// benchBinds returns a client with a nonce and the signed ChannelBind
// requests of channels 0x4000.. to benchPeer(0..n-1), built once so that
// a benchmark times the engine, not the client.
func benchBinds(b *testing.B, f *fixture, n int) (*client, [][]byte) {
	c := f.client("user", "pass")
	c.learnNonce(f.send(c.ft, raw(b, stun.MethodAllocate, transportUDP())))
	reqs := make([][]byte, n)
	for i := range reqs {
		reqs[i] = c.signed(stun.MethodChannelBind, channelNumber(uint16(minChannelNumber+i)), peerAttr(benchPeer(i)))
	}
	return c, reqs
}

// BenchmarkChannelBind times one ChannelBind, averaged over filling an
// allocation from 0 to N channels (each to a new peer). With a list
// scanned per bind the cost grows with N; with indexed tables it does not.
func BenchmarkChannelBind(b *testing.B) {
	for _, n := range benchChannelCounts {
		b.Run(fmt.Sprintf("channels=%d", n), func(b *testing.B) {
			f := newFixture(b)
			c, reqs := benchBinds(b, f, n)
			alloc := c.signed(stun.MethodAllocate, transportUDP())
			free := c.signed(stun.MethodRefresh, lifetimeSetter(0))
			var r Result
			f.e.HandleClient(testListener{}, c.ft, alloc, &r)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i == n {
					// A full allocation: start again on a fresh one.
					b.StopTimer()
					f.e.HandleClient(testListener{}, c.ft, free, &r)
					f.e.HandleClient(testListener{}, c.ft, alloc, &r)
					i = 0
					b.StartTimer()
				}
				f.e.HandleClient(testListener{}, c.ft, reqs[i], &r)
				i++
			}
			if m := f.send(c.ft, reqs[0]); code(m) != 0 {
				b.Fatalf("ChannelBind refused: %d", code(m))
			}
		})
	}
}

// BenchmarkRelayLateChannel relays on the last channel bound of an
// allocation that has N: ChannelData from the client, and a peer's datagram
// framed as ChannelData for the client.
func BenchmarkRelayLateChannel(b *testing.B) {
	for _, n := range benchChannelCounts {
		f := newFixture(b)
		c, reqs := benchBinds(b, f, n)
		if m := f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP())); code(m) != 0 {
			b.Fatalf("Allocate: %d", code(m))
		}
		for _, req := range reqs {
			if m := f.send(c.ft, req); code(m) != 0 {
				b.Fatalf("ChannelBind: %d", code(m))
			}
		}
		a := f.e.Lookup(c.ft)
		last, peer := uint16(minChannelNumber+n-1), benchPeer(n-1)
		cd := channelData(last, make([]byte, 100))
		b.Run(fmt.Sprintf("client/channels=%d", n), func(b *testing.B) {
			var r Result
			b.ReportAllocs()
			for b.Loop() {
				f.e.HandleClient(testListener{}, c.ft, cd, &r)
			}
			if r.Kind != Forward || r.Peer != peer {
				b.Fatalf("not relayed: kind %d drop %v", r.Kind, r.Drop)
			}
		})
		b.Run(fmt.Sprintf("peer/channels=%d", n), func(b *testing.B) {
			buf := make([]byte, PeerHeadroom+1500+PeerTailroom)
			b.ReportAllocs()
			for b.Loop() {
				msg, _, ok := f.e.HandlePeer(a, peer, buf, PeerHeadroom, 100)
				if !ok || msg[0] != byte(last>>8) || msg[1] != byte(last) {
					b.Fatal("not framed on the late channel")
				}
			}
		})
	}
}
