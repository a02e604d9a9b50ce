//go:build linux

package netns

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/tern-gw/tern/bench/udpbatch"
	"github.com/tern-gw/tern/internal/testenv"
)

// vethTopology makes a veth topology for a test (root), removed after.
func vethTopology(t *testing.T) *Topology {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "network namespaces need root")
	}
	topo, err := New("veth", "f")
	if err != nil {
		testenv.SkipOrFail(t, "cannot make network namespaces: %v", err)
	}
	t.Cleanup(topo.Close)
	if !udpbatch.GSOSupported() {
		testenv.SkipOrFail(t, "the kernel has no UDP_SEGMENT (Linux 4.18+)")
	}
	return topo
}

// rxPackets is device dev's received packets in namespace ns.
func rxPackets(t *testing.T, ns, dev string) uint64 {
	t.Helper()
	var n uint64
	err := Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		n = l.Attrs().Statistics.RxPackets
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// gsoPair opens the peer's socket (GRO on with gro) and a client socket
// connected to it, in their namespaces.
func gsoPair(t *testing.T, topo *Topology, gro bool) (rx, tx *udpbatch.Conn) {
	t.Helper()
	err := Do(topo.Peer, func() error {
		uc, err := udpbatch.Listen(netip.AddrPortFrom(topo.PeerIP, 0), udpbatch.Options{Buffer: 1 << 20})
		if err != nil {
			return err
		}
		_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rx, err = udpbatch.New(uc, 64); err != nil {
			return err
		}
		if gro {
			return rx.EnableGRO()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	err = Do(topo.Client, func() error {
		uc, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(rx.LocalAddr()))
		if err != nil {
			return err
		}
		tx, err = udpbatch.New(uc, 8)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	return rx, tx
}

// readAll reads until want datagrams (by Segs) are in and returns the
// reads' Segs.
func readAll(t *testing.T, rx *udpbatch.Conn, want int) []int {
	t.Helper()
	ms := make([]udpbatch.Message, 16)
	for i := range ms {
		ms[i].Buf = make([]byte, 64<<10)
	}
	var segs []int
	for total := 0; total < want; {
		n, err := rx.ReadBatch(ms)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", total, want, err)
		}
		for _, m := range ms[:n] {
			if m.N != m.Segs*100 {
				t.Fatalf("a read of %d bytes for %d datagrams of 100", m.N, m.Segs)
			}
			segs = append(segs, m.Segs)
			total += m.Segs
		}
	}
	return segs
}

// TestSegmentGSO: with SegmentGSO, a UDP GSO send of 32 datagrams from the
// client's namespace reaches the server's namespace as 32 packets — its
// veth end counts each, so a tc program there sees one datagram per packet
// — and the peer's socket reads 32 datagrams.
func TestSegmentGSO(t *testing.T) {
	topo := vethTopology(t)
	if err := topo.SegmentGSO(); err != nil {
		t.Fatal(err)
	}
	for _, d := range [][2]string{{topo.Client, "tobc"}, {topo.Peer, "tobp"}} {
		if on, err := Feature(d[0], d[1], udpSegmentation); err != nil || on {
			t.Fatalf("%s: %s on %v, %v; want off", d[1], udpSegmentation, on, err)
		}
	}
	rx, tx := gsoPair(t, topo, false)
	before := rxPackets(t, topo.Server, "tobsc")
	if n, err := tx.WriteGSO(bytes.Repeat([]byte{7}, 32*100), 100); err != nil || n != 32 {
		t.Fatalf("WriteGSO: %d, %v", n, err)
	}
	segs := readAll(t, rx, 32)
	if len(segs) != 32 {
		t.Errorf("the peer read %d messages, want 32 datagrams", len(segs))
	}
	// Other packets (IPv6 neighbour discovery) may add to the count, never
	// take from it: a GSO packet passed on whole counts once.
	if got := rxPackets(t, topo.Server, "tobsc") - before; got < 32 {
		t.Errorf("the server's veth received %d packets, want 32 (one per datagram)", got)
	}
}

// TestGROSink: with GROSink, the peer's socket with UDP_GRO reads the 32
// datagrams of a GSO send, segmented on the client's side and relayed one
// by one, with Segs adding up to 32 (GRO on the peer's veth joins them:
// usually one read).
func TestGROSink(t *testing.T) {
	topo := vethTopology(t)
	if err := topo.SegmentGSO(); err != nil {
		t.Fatal(err)
	}
	if err := topo.GROSink(); err != nil {
		t.Fatal(err)
	}
	if on, err := Feature(topo.Peer, "tobp", "rx-gro"); err != nil || !on {
		t.Fatalf("tobp: rx-gro on %v, %v; want on", on, err)
	}
	rx, tx := gsoPair(t, topo, true)
	if _, err := tx.WriteGSO(bytes.Repeat([]byte{7}, 32*100), 100); err != nil {
		t.Fatal(err)
	}
	segs := readAll(t, rx, 32)
	t.Logf("32 datagrams in %d reads: %v", len(segs), segs)
}
