package dtls

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/dtls/v2"

	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
)

// TestOutbox queues records for one association in a relay worker's
// outbox, as a worker's wake-up does, and checks that only the first
// queue asks for a flush, that nothing leaves before the flush, and that
// the flush delivers every record, in order, to pion's client; then that
// an outbox with no room left sends what it holds early, still owing
// its flush.
func TestOutbox(t *testing.T) {
	a, _, client, _ := handshake(t, dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
	rec, err := a.gcmRecords()
	if err != nil {
		t.Fatal(err)
	}
	o := newOutboxes(a.mux.rc, 1)[0]
	buf := make([]byte, 1500)
	readAll := func(want []string) {
		t.Helper()
		for _, w := range want {
			_ = client.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, err := client.Read(buf)
			if err != nil || string(buf[:n]) != w {
				t.Fatalf("client read %d bytes %.16q, %v; want %d bytes %.16q", n, buf[:n], err, len(w), w)
			}
		}
	}

	var want []string
	for i := range 3 {
		msg := fmt.Sprintf("message %d", i)
		first, err := o.queue(rec, a.remote, netip.Addr{}, []byte(msg))
		if err != nil {
			t.Fatal(err)
		}
		if first != (i == 0) {
			t.Errorf("message %d: flush asked for = %v, want %v", i, first, i == 0)
		}
		want = append(want, msg)
	}
	_ = client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := client.Read(buf); err == nil {
		t.Fatalf("client read %q before the flush", buf[:n])
	}
	o.flush()
	readAll(want)

	// Messages of 1,200 bytes: once the outbox has no room for the next
	// record, it sends what it holds first; the worker still owes the flush
	// that sends the last.
	const size = 1200
	fit := 0
	for used := 0; outboxBytes-used >= record.SealRoom(size); used += record.Overhead + size {
		fit++
	}
	want = want[:0]
	for i := range fit + 1 {
		msg := bytes.Repeat([]byte{'a' + byte(i%26)}, size)
		first, err := o.queue(rec, a.remote, netip.Addr{}, msg)
		if err != nil {
			t.Fatal(err)
		}
		if first != (i == 0) {
			t.Errorf("message %d of %d bytes: flush asked for = %v, want %v", i, size, first, i == 0)
		}
		want = append(want, string(msg))
	}
	readAll(want[:fit])
	o.flush()
	readAll(want[fit:])
}
