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

// TestClusterCounters: runs of same-cluster packets are added on a change
// of cluster or a flush, and folds add them up per cluster.
func TestClusterCounters(t *testing.T) {
	var a, b Worker
	var run ClusterRun
	for _, p := range []struct {
		id uint32
		n  int
	}{{2, 100}, {2, 50}, {5, 10}, {2, 1}} {
		run.Tx(&a, p.id, p.n)
	}
	run.FlushTx(&a)
	run.FlushTx(&a) // an empty run adds nothing
	run.Rx(&b, 5, 7)
	run.FlushRx(&b)
	var s Sum
	a.AddTo(&s)
	b.AddTo(&s)
	if c := s.Cluster(2); c != (ClusterSum{Tx: 3, TxBytes: 151}) {
		t.Errorf("cluster 2: %+v", c)
	}
	if c := s.Cluster(5); c != (ClusterSum{Tx: 1, TxBytes: 10, Rx: 1, RxBytes: 7}) {
		t.Errorf("cluster 5: %+v", c)
	}
	if c := s.Cluster(9); c != (ClusterSum{}) {
		t.Errorf("cluster 9, never counted: %+v", c)
	}
	var total Sum
	total.Add(&s)
	total.Add(&s)
	if c := total.Cluster(5); c.Tx != 2 || c.RxBytes != 14 {
		t.Errorf("Sum.Add: cluster 5 %+v", c)
	}
}

// TestClusterPadding: one worker's counters of a cluster fill a cache line,
// so two workers' never share one.
func TestClusterPadding(t *testing.T) {
	if size := unsafe.Sizeof(Cluster{}); size < 64 {
		t.Errorf("Cluster is %d bytes, want >= 64", size)
	}
}

// TestClusterFoldWhileCounting: a scrape folds while the worker adds new
// clusters and counts (run with -race); every fold sees counts that never
// go down.
func TestClusterFoldWhileCounting(t *testing.T) {
	var w Worker
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			w.Cluster(uint32(i % 40)).Tx.Add(1)
		}
	}()
	var last uint64
	for {
		var s Sum
		w.AddTo(&s)
		var n uint64
		for _, c := range s.Clusters {
			n += c.Tx
		}
		if n < last {
			t.Fatalf("fold went from %d to %d", last, n)
		}
		last = n
		select {
		case <-done:
			var s Sum
			w.AddTo(&s)
			if s.Cluster(0).Tx != 50 || len(s.Clusters) != 40 {
				t.Fatalf("after counting: cluster 0 %d, %d clusters", s.Cluster(0).Tx, len(s.Clusters))
			}
			return
		default:
		}
	}
}
