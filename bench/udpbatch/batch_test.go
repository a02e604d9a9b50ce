package udpbatch

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestBatchRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch int
		count int
		block bool
	}{
		{"one", 1, 1, false},
		{"fits", 8, 8, false},
		{"spans batches", 4, 11, false},
		{"blocking reader", 8, 11, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo := netip.MustParseAddrPort("127.0.0.1:0")
			a, err := Listen(lo, Options{Buffer: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			var cb *Conn
			if tc.block {
				cb, err = ListenBlocking(lo, Options{ReusePort: true}, tc.batch)
			} else {
				var b *net.UDPConn
				if b, err = Listen(lo, Options{ReusePort: true}); err == nil {
					_ = b.SetReadDeadline(time.Now().Add(2 * time.Second))
					cb, err = New(b, tc.batch)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			ca, _ := New(a, tc.batch)
			defer ca.Close()
			defer cb.Close()
			dst := cb.LocalAddr()
			out := make([]Message, tc.count)
			for i := range out {
				out[i] = Message{Buf: []byte{byte(i), 'x'}, Addr: dst}
			}
			if n, err := ca.WriteBatch(out); err != nil || n != tc.count {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			in := make([]Message, tc.batch)
			for i := range in {
				in[i].Buf = make([]byte, 64)
			}
			src := a.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort()
			got := 0
			for got < tc.count {
				n, err := cb.ReadBatch(in)
				if err != nil {
					t.Fatalf("ReadBatch after %d: %v", got, err)
				}
				for _, m := range in[:n] {
					if want := []byte{byte(got), 'x'}; !bytes.Equal(m.Buf[:m.N], want) {
						t.Fatalf("datagram %d = %q, want %q", got, m.Buf[:m.N], want)
					}
					if m.Addr != src {
						t.Fatalf("source %v, want %v", m.Addr, src)
					}
					got++
				}
			}
		})
	}
}

// TestNoAllocs guards the load generator's promise: moving a batch does not
// allocate, so the harness does not load the GC while it measures a server.
// It covers a reader parked in the runtime poller and one blocked in the
// kernel (ListenBlocking).
func TestNoAllocs(t *testing.T) {
	for _, block := range []bool{false, true} {
		t.Run(map[bool]string{false: "poller", true: "blocking"}[block], func(t *testing.T) {
			lo := netip.MustParseAddrPort("127.0.0.1:0")
			a, err := Listen(lo, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ca, _ := New(a, 16)
			defer ca.Close()
			var cb *Conn
			if block {
				cb, err = ListenBlocking(lo, Options{Buffer: 4 << 20}, 16)
			} else {
				var b *net.UDPConn
				if b, err = Listen(lo, Options{Buffer: 4 << 20}); err == nil {
					cb, err = New(b, 16)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cb.Close()
			dst := cb.LocalAddr()
			out := make([]Message, 16)
			in := make([]Message, 16)
			for i := range out {
				out[i] = Message{Buf: make([]byte, 100), Addr: dst}
				in[i].Buf = make([]byte, 2048)
			}
			allocs := testing.AllocsPerRun(50, func() {
				if _, err := ca.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < len(out); {
					n, err := cb.ReadBatch(in)
					if err != nil {
						t.Fatal(err)
					}
					got += n
				}
			})
			if allocs > 0 {
				t.Fatalf("%.1f allocations per batch round trip, want 0", allocs)
			}
		})
	}
}
