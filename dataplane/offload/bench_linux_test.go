package offload

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkVethRelay measures ChannelData packets/s from a client to a
// peer through the tern namespace of newTopo (two veth pairs), relayed by:
//
//   - socket: a plain Go relay (one read and one write syscall per
//     packet on the listener and relay sockets), the user-space baseline;
//   - TC, XDP: the offload programs, no socket touched.
//
// The sender keeps at most window packets in flight, so the figure is a
// lossless rate; pkts/s counts delivered packets. Run it with
//
//	go test -run '^$' -bench VethRelay -benchtime 200000x ./dataplane/offload/
//
// as root. It is a smoke figure for one flow on this machine's cores, not
// issue 15's whole-machine measurement (ternbench does that).
func BenchmarkVethRelay(b *testing.B) {
	for _, mode := range []string{"socket", "TC", "XDP"} {
		b.Run(mode, func(b *testing.B) { benchVethRelay(b, mode) })
	}
}

func benchVethRelay(b *testing.B, mode string) {
	tp := newTopo(b)
	setTxChecksum(b, tp.client, tp.cvethC, false)
	setTxChecksum(b, tp.peer, tp.pvethP, false)
	listenerSock := listen(b, tp.tern, listenerAddr)
	relaySock := listen(b, tp.tern, relayAddr)
	client := listen(b, tp.client, clientAddr)
	peer := listen(b, tp.peer, peerAddr)
	send(b, relaySock, peerAddr, []byte("warm"))
	recv(b, peer)
	send(b, listenerSock, clientAddr, []byte("warm"))
	recv(b, client)

	switch mode {
	case "socket":
		go socketRelay(listenerSock, relaySock, netip.MustParseAddrPort(peerAddr))
	case "XDP":
		xdpPass(b, tp.client, tp.cvethC)
		xdpPass(b, tp.peer, tp.pvethP)
		fallthrough
	case "TC":
		o := openIn(b, tp.tern, Config{Mode: Mode(mode), Interfaces: []string{tp.cvethT, tp.pvethT}})
		if err := o.Put(testPath(time.Now().Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
	}

	measureRelay(b, client, peer, listenerAddr)
}

// BenchmarkLoopbackRelay is BenchmarkVethRelay on 127.0.0.x in one
// namespace: socket relay against tc on lo (Auto's choice there).
//
//	go test -run '^$' -bench LoopbackRelay -benchtime 300000x ./dataplane/offload/
func BenchmarkLoopbackRelay(b *testing.B) {
	for _, mode := range []string{"socket", "TC"} {
		b.Run(mode, func(b *testing.B) {
			requireRoot(b)
			ns := newNetns(b, uniq()+"b")
			run(b, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1")
			listener := listen(b, ns, runListener)
			relay := listen(b, ns, runRelay)
			client := listen(b, ns, runClient)
			peer := listen(b, ns, runPeer)
			if mode == "socket" {
				go socketRelay(listener, relay, netip.MustParseAddrPort(runPeer))
			} else {
				o := openIn(b, ns, Config{Mode: TC, Interfaces: []string{"lo"}})
				p := Path{
					Client: netip.MustParseAddrPort(runClient), Listener: netip.MustParseAddrPort(runListener),
					Relay: netip.MustParseAddrPort(runRelay), Peer: netip.MustParseAddrPort(runPeer),
					Channel: 0x4001, Expires: time.Now().Add(time.Hour),
				}
				if err := o.Put(p); err != nil {
					b.Fatal(err)
				}
			}
			measureRelay(b, client, peer, runListener)
		})
	}
}

// measureRelay sends b.N ChannelData datagrams from client to listener,
// counts what peer receives, and reports pkts/s, loss% and cpu-ns/pkt.
func measureRelay(b *testing.B, client, peer *net.UDPConn, listenerAddr string) {
	payload := bytes.Repeat([]byte{0xab}, 160) // an Opus-sized datagram
	pkt := channelData(0x4001, payload, 0)
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(listenerAddr))
	// credits bounds the packets in flight without spinning: the sender
	// takes one per packet, the receiver returns one per delivery.
	const window = 128
	credits := make(chan struct{}, window)
	for range window {
		credits <- struct{}{}
	}
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for got.Load() < int64(b.N) {
			_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := peer.ReadFromUDPAddrPort(buf); err != nil {
				return // the rest was lost
			}
			got.Add(1)
			credits <- struct{}{}
		}
	}()
	b.ResetTimer()
	busy0 := busyNanos(b)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		select {
		case <-credits:
		case <-done:
			b.Fatalf("%d of %d delivered, then nothing for 2s", got.Load(), i)
		}
		if _, err := client.WriteToUDP(pkt, to); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	elapsed := time.Since(start)
	busy := busyNanos(b) - busy0
	b.StopTimer()
	n := got.Load()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(busy)/float64(n), "cpu-ns/pkt")
	b.ReportMetric(100*float64(int64(b.N)-n)/float64(b.N), "loss%")
}

// busyNanos returns the whole machine's non-idle CPU time from
// /proc/stat (user, nice, system, irq, softirq, steal) in ns: the relay's
// softirq work runs outside any one process. Other processes on the
// machine add to it, so compare figures from one run.
func busyNanos(tb testing.TB) int64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		tb.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			tb.Fatalf("/proc/stat: %q: %v", line, err)
		}
		ticks += v
	}
	return ticks * int64(time.Second) / 100 // USER_HZ
}

// socketRelay relays ChannelData from the listener socket to peer through
// the relay socket until the listener is closed: the per-packet work the
// offload removes, without any of ternd's batching.
func socketRelay(listener, relay *net.UDPConn, peer netip.AddrPort) {
	buf := make([]byte, 2048)
	for {
		n, _, err := listener.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if n < 4 {
			continue
		}
		l := int(binary.BigEndian.Uint16(buf[2:4]))
		if 4+l > n {
			continue
		}
		_, _ = relay.WriteToUDPAddrPort(buf[4:4+l], peer)
	}
}

// BenchmarkProgram runs each program once per iteration through
// BPF_PROG_TEST_RUN: "relay" on a 160-byte ChannelData datagram that
// matches a path (rewritten and passed up, as for a local peer), "pass"
// on a STUN request that matches none (the cost every other packet pays
// for the program being attached). Each figure includes the syscall and
// the kernel building the skb or frame, the same in both, so relay-pass
// is the rewrite's own cost.
//
//	go test -run '^$' -bench Program ./dataplane/offload/
func BenchmarkProgram(b *testing.B) {
	r := newRunner(b)
	relay := frame(runClient, runListener, channelData(0x4001, bytes.Repeat([]byte{0xab}, 160), 0))
	stun := frame(runClient, runListener, stunBinding)
	for _, hook := range []Mode{TC, XDP} {
		for _, c := range []struct {
			name string
			in   []byte
		}{{"relay", relay}, {"pass", stun}} {
			b.Run(string(hook)+"/"+c.name, func(b *testing.B) {
				err := inNetns(b, r.ns, func() error {
					for b.Loop() {
						if _, _, err := r.runHere(hook, c.in); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
