package udpio

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestCoalesce checks which queued datagrams become one UDP_SEGMENT message.
func TestCoalesce(t *testing.T) {
	a := netip.MustParseAddrPort("127.0.0.1:1000")
	b := netip.MustParseAddrPort("127.0.0.1:2000")
	type msg struct {
		fd   int
		size int
		to   netip.AddrPort
		src  netip.Addr // AddFrom's source; the zero Addr is Add
	}
	var z netip.Addr
	s1, s2 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	for _, tc := range []struct {
		name string
		in   []msg
		segs []int // datagrams per message after coalescing
	}{
		{"one datagram", []msg{{3, 100, a, z}}, []int{1}},
		{"run of one size", []msg{{3, 100, a, z}, {3, 100, a, z}, {3, 100, a, z}}, []int{3}},
		{"shorter last joins", []msg{{3, 100, a, z}, {3, 100, a, z}, {3, 40, a, z}}, []int{3}},
		{"shorter ends the run", []msg{{3, 100, a, z}, {3, 40, a, z}, {3, 40, a, z}}, []int{2, 1}},
		{"longer starts a new run", []msg{{3, 40, a, z}, {3, 100, a, z}, {3, 100, a, z}}, []int{1, 2}},
		{"other destination", []msg{{3, 100, a, z}, {3, 100, b, z}, {3, 100, b, z}}, []int{1, 2}},
		{"other socket", []msg{{3, 100, a, z}, {4, 100, a, z}, {4, 100, a, z}}, []int{1, 2}},
		{"empty datagrams stay single", []msg{{3, 0, a, z}, {3, 0, a, z}}, []int{1, 1}},
		{"one source", []msg{{3, 100, a, s1}, {3, 100, a, s1}}, []int{2}},
		{"other source", []msg{{3, 100, a, s1}, {3, 100, a, s2}, {3, 100, a, s2}}, []int{1, 2}},
		{"source and none", []msg{{3, 100, a, s1}, {3, 100, a, z}}, []int{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newBatch(BatchSize)
			g := newGSOState(BatchSize)
			var want []byte
			for i, m := range tc.in {
				p := bytes.Repeat([]byte{byte(i + 1)}, m.size)
				want = append(want, p...)
				sb.AddFrom(m.fd, p, m.to, m.src)
			}
			sb.coalesce(g)
			if sb.n != len(tc.segs) {
				t.Fatalf("%d messages, want %d", sb.n, len(tc.segs))
			}
			var got []byte
			for i := 0; i < sb.n; i++ {
				if g.segs[i] != tc.segs[i] {
					t.Errorf("message %d carries %d datagrams, want %d", i, g.segs[i], tc.segs[i])
				}
				wantCtl := tc.segs[i] > 1 || sb.srcs[i].IsValid()
				if ctl := sb.hdrs[i].Hdr.Control != nil; ctl != wantCtl {
					t.Errorf("message %d: control %v, want %v", i, ctl, wantCtl)
				}
				if sb.iovs[i].Len > 0 {
					got = append(got, unsafeBytes(sb, i)...)
				}
			}
			if !bytes.Equal(got, want) {
				t.Errorf("payload bytes changed by coalescing")
			}
		})
	}
}

// TestGSOSendsSeparateDatagrams: a coalesced run arrives at a plain UDP
// socket as the datagrams that were queued, in order.
func TestGSOSendsSeparateDatagrams(t *testing.T) {
	if !GSOSupported() {
		testenv.SkipOrFail(t, "kernel without UDP_SEGMENT (Linux 4.18+)")
	}
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	fd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{NonBlock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	sb := newBatch(BatchSize)
	sb.gso = newGSOState(BatchSize)
	var want [][]byte
	for i, size := range []int{120, 120, 120, 120, 57, 300} {
		p := bytes.Repeat([]byte{byte(i + 1)}, size)
		want = append(want, p)
		sb.Add(fd, p, to)
	}
	if sent, _ := sb.Flush(); sent != len(want) {
		t.Fatalf("flush reports %d datagrams sent, want %d", sent, len(want))
	}
	buf := make([]byte, 2048)
	_ = rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	for i, w := range want {
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], w) {
			t.Fatalf("datagram %d: %d bytes of %d, want %d bytes of %d", i, n, buf[0], len(w), w[0])
		}
	}
}

// unsafeBytes is the payload of queued message i.
func unsafeBytes(b *Batch, i int) []byte { return unsafe.Slice(b.iovs[i].Base, b.iovs[i].Len) }

// TestGSOFallbackSplits: the fallback for a refused GSO send sends each
// datagram of the run on its own, with the sizes that were queued.
func TestGSOFallbackSplits(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	fd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{NonBlock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	sb := newBatch(BatchSize)
	g := newGSOState(BatchSize)
	want := [][]byte{bytes.Repeat([]byte{1}, 90), bytes.Repeat([]byte{2}, 90), bytes.Repeat([]byte{3}, 30)}
	for _, p := range want {
		sb.Add(fd, p, rx.LocalAddr().(*net.UDPAddr).AddrPort())
	}
	sb.coalesce(g)
	if sb.n != 1 || g.segs[0] != 3 {
		t.Fatalf("coalesced into %d messages (first carries %d), want one of 3", sb.n, g.segs[0])
	}
	if sent, n := sb.sendSegments(0, g.segs[0]); sent != 3 || n != 210 {
		t.Fatalf("sendSegments = %d datagrams, %d bytes; want 3, 210", sent, n)
	}
	buf := make([]byte, 2048)
	_ = rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	for i, w := range want {
		n, err := rx.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], w) {
			t.Fatalf("datagram %d: %d bytes, %v; want %d bytes of %d", i, n, err, len(w), w[0])
		}
	}
}
