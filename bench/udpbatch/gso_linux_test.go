//go:build linux

package udpbatch

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// gsoPayload is n datagrams of seg bytes, datagram i filled with byte i+1,
// and a shorter last one of last bytes (0: none).
func gsoPayload(n, seg, last int) ([]byte, [][]byte) {
	var all []byte
	var dgrams [][]byte
	for i := range n {
		d := bytes.Repeat([]byte{byte(i + 1)}, seg)
		all, dgrams = append(all, d...), append(dgrams, d)
	}
	if last > 0 {
		d := bytes.Repeat([]byte{0xee}, last)
		all, dgrams = append(all, d...), append(dgrams, d)
	}
	return all, dgrams
}

// dialConn is a connected UDP Conn from 127.0.0.1 to to.
func dialConn(t *testing.T, to netip.AddrPort) *Conn {
	t.Helper()
	uc, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(uc, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listenConn is a UDP Conn on 127.0.0.1 that reads batches of n into
// buffers of size bytes.
func listenConn(t *testing.T, n, size int) (*Conn, []Message) {
	t.Helper()
	uc, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(uc, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ms := make([]Message, n)
	for i := range ms {
		ms[i].Buf = make([]byte, size)
	}
	_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	return c, ms
}

// readSegs reads until want datagrams (by Segs) are in, and returns the
// messages' payloads and Segs.
func readSegs(t *testing.T, c *Conn, ms []Message, want int) ([][]byte, []int) {
	t.Helper()
	var got [][]byte
	var segs []int
	total := 0
	for total < want {
		n, err := c.ReadBatch(ms)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", total, want, err)
		}
		for _, m := range ms[:n] {
			got = append(got, append([]byte(nil), m.Buf[:m.N]...))
			segs = append(segs, m.Segs)
			total += m.Segs
		}
	}
	return got, segs
}

// TestWriteGSOOnLoopback: one WriteGSO of 32 datagrams of 104 bytes and a
// shorter last one reaches a plain UDP socket over loopback as 33
// datagrams, each its own read with its own bytes, in order. lo hands the
// GSO packet on whole (tx-udp-segmentation), and the receiving socket,
// which did not ask for GRO, has the kernel cut it apart.
func TestWriteGSOOnLoopback(t *testing.T) {
	if !GSOSupported() {
		testenv.SkipOrFail(t, "the kernel has no UDP_SEGMENT (Linux 4.18+)")
	}
	rx, ms := listenConn(t, 64, 2048)
	tx := dialConn(t, rx.LocalAddr())
	p, want := gsoPayload(32, 104, 40)
	n, err := tx.WriteGSO(p, 104)
	if err != nil || n != 33 {
		t.Fatalf("WriteGSO: %d datagrams, %v; want 33", n, err)
	}
	got, segs := readSegs(t, rx, ms, 33)
	if len(got) != 33 {
		t.Fatalf("%d reads, want 33 datagrams", len(got))
	}
	for i := range got {
		if segs[i] != 1 || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %d bytes (segs %d), want %d bytes of %#x", i, len(got[i]), segs[i], len(want[i]), want[i][0])
		}
	}
	if _, err := tx.WriteGSO(make([]byte, 65*100), 100); err == nil {
		t.Error("WriteGSO of 65 segments: no error")
	}
}

// TestReadGRO: a socket with EnableGRO reads the datagrams of a WriteGSO
// with Segs adding up to what was sent and the bytes back to back in
// order, however the kernel joined them (on loopback the GSO packet
// arrives whole: one read of 33).
func TestReadGRO(t *testing.T) {
	if !GSOSupported() {
		testenv.SkipOrFail(t, "the kernel has no UDP_SEGMENT (Linux 4.18+)")
	}
	rx, ms := listenConn(t, 4, 64<<10)
	if err := rx.EnableGRO(); err != nil {
		t.Fatalf("EnableGRO: %v", err)
	}
	tx := dialConn(t, rx.LocalAddr())
	p, _ := gsoPayload(32, 104, 40)
	if _, err := tx.WriteGSO(p, 104); err != nil {
		t.Fatal(err)
	}
	got, segs := readSegs(t, rx, ms, 33)
	if b := bytes.Join(got, nil); !bytes.Equal(b, p) {
		t.Fatalf("%d bytes in %d reads, want the %d sent in order", len(b), len(got), len(p))
	}
	total := 0
	for _, s := range segs {
		total += s
	}
	if total != 33 {
		t.Fatalf("Segs add up to %d (%v), want 33", total, segs)
	}
	t.Logf("33 datagrams in %d reads (Segs %v)", len(got), segs)
}
