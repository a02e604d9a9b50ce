package stats

import (
	"testing"
	"unsafe"

	"github.com/tern-gw/tern/turn"
)

func TestFold(t *testing.T) {
	var a, b Worker
	a.Rx.Add(2)
	a.RxBytes.Add(200)
	b.Rx.Add(3)
	b.PeerTxBytes.Add(7)
	b.Drops[turn.DropMalformed].Add(4)
	var s Sum
	a.AddTo(&s)
	b.AddTo(&s)
	if s.Rx != 5 || s.RxBytes != 200 || s.PeerTxBytes != 7 || s.Drops[turn.DropMalformed] != 4 {
		t.Errorf("sum %+v", s)
	}
}

// TestWorkerPadding: two Workers side by side in a slice share no cache line.
func TestWorkerPadding(t *testing.T) {
	var w Worker
	if off := unsafe.Offsetof(w.Rx); off < 64 {
		t.Errorf("first counter at offset %d, want >= 64", off)
	}
	if tail := unsafe.Sizeof(w) - (unsafe.Offsetof(w.Drops) + unsafe.Sizeof(w.Drops)); tail < 64 {
		t.Errorf("%d bytes after the last counter, want >= 64", tail)
	}
}
