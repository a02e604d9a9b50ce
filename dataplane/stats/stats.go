// Package stats holds the dataplane's per-worker packet counters. Each
// listener and relay worker owns a Worker and is its only writer; /metrics
// folds them into a Sum when scraped. Writes are atomic so that a scrape
// can read them, and each Worker (and each of its per-cluster counters) is
// padded to its own cache lines, so no counter is shared between workers on
// the packet path.
package stats

import (
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/turn"
)

// Worker is one worker's packet and byte counters.
type Worker struct {
	_ [64]byte
	// Rx and RxBytes count packets and bytes from clients; Tx and TxBytes
	// to clients.
	Rx, RxBytes, Tx, TxBytes atomic.Uint64
	// PeerRx and PeerRxBytes count datagrams and bytes from peers on relay
	// sockets; PeerTx and PeerTxBytes to peers.
	PeerRx, PeerRxBytes, PeerTx, PeerTxBytes atomic.Uint64
	// Drops counts dropped packets by reason.
	Drops [turn.NumDropReasons]atomic.Uint64

	// clusters[id] are the counters of the cluster numbered id (see
	// turn.Transport.PeerCluster), nil until the worker first counts one of
	// its packets. The slice is replaced, never written in place, so a
	// scrape reads it without a lock; grow serializes the replacements.
	clusters atomic.Pointer[[]*Cluster]
	grow     sync.Mutex
	_        [64]byte
}

// Cluster is one worker's counters of one cluster: datagrams and bytes
// received from its peers (Rx) and sent to them (Tx). It fills a cache line
// of its own.
type Cluster struct {
	Rx, RxBytes, Tx, TxBytes atomic.Uint64
	_                        [32]byte
}

// Cluster returns w's counters of cluster id. The first call for an id
// allocates them (once per worker and cluster); later calls are two loads.
func (w *Worker) Cluster(id uint32) *Cluster {
	if p := w.clusters.Load(); p != nil && int(id) < len(*p) {
		if c := (*p)[id]; c != nil {
			return c
		}
	}
	return w.newCluster(id)
}

func (w *Worker) newCluster(id uint32) *Cluster {
	w.grow.Lock()
	defer w.grow.Unlock()
	var cur []*Cluster
	if p := w.clusters.Load(); p != nil {
		cur = *p
		if int(id) < len(cur) && cur[id] != nil {
			return cur[id]
		}
	}
	next := make([]*Cluster, max(len(cur), int(id)+1))
	copy(next, cur)
	c := new(Cluster)
	next[id] = c
	w.clusters.Store(&next)
	return c
}

// AddTo adds w's counters to sum.
func (w *Worker) AddTo(sum *Sum) {
	sum.Rx += w.Rx.Load()
	sum.RxBytes += w.RxBytes.Load()
	sum.Tx += w.Tx.Load()
	sum.TxBytes += w.TxBytes.Load()
	sum.PeerRx += w.PeerRx.Load()
	sum.PeerRxBytes += w.PeerRxBytes.Load()
	sum.PeerTx += w.PeerTx.Load()
	sum.PeerTxBytes += w.PeerTxBytes.Load()
	for i := range w.Drops {
		sum.Drops[i] += w.Drops[i].Load()
	}
	if p := w.clusters.Load(); p != nil {
		for id, c := range *p {
			if c == nil {
				continue
			}
			s := sum.cluster(uint32(id))
			s.Rx += c.Rx.Load()
			s.RxBytes += c.RxBytes.Load()
			s.Tx += c.Tx.Load()
			s.TxBytes += c.TxBytes.Load()
		}
	}
}

// Sum is a fold of Workers at one scrape.
type Sum struct {
	Rx, RxBytes, Tx, TxBytes                 uint64
	PeerRx, PeerRxBytes, PeerTx, PeerTxBytes uint64
	Drops                                    [turn.NumDropReasons]uint64
	// Clusters[id] are the folded counters of the cluster numbered id.
	Clusters []ClusterSum
}

// ClusterSum is a fold of one cluster's counters.
type ClusterSum struct {
	Rx, RxBytes, Tx, TxBytes uint64
}

func (s *Sum) cluster(id uint32) *ClusterSum {
	if int(id) >= len(s.Clusters) {
		s.Clusters = append(s.Clusters, make([]ClusterSum, int(id)+1-len(s.Clusters))...)
	}
	return &s.Clusters[id]
}

// Cluster returns the folded counters of cluster id (zero when none were
// counted).
func (s *Sum) Cluster(id uint32) ClusterSum {
	if int(id) < len(s.Clusters) {
		return s.Clusters[id]
	}
	return ClusterSum{}
}

// AddCluster adds c to the counters of cluster id: counts made outside the
// Workers (the kernel fast path's) join the same totals.
func (s *Sum) AddCluster(id uint32, c ClusterSum) {
	d := s.cluster(id)
	d.Rx += c.Rx
	d.RxBytes += c.RxBytes
	d.Tx += c.Tx
	d.TxBytes += c.TxBytes
}

// Add adds o to s.
func (s *Sum) Add(o *Sum) {
	s.Rx += o.Rx
	s.RxBytes += o.RxBytes
	s.Tx += o.Tx
	s.TxBytes += o.TxBytes
	s.PeerRx += o.PeerRx
	s.PeerRxBytes += o.PeerRxBytes
	s.PeerTx += o.PeerTx
	s.PeerTxBytes += o.PeerTxBytes
	for i := range o.Drops {
		s.Drops[i] += o.Drops[i]
	}
	for id, c := range o.Clusters {
		d := s.cluster(uint32(id))
		d.Rx += c.Rx
		d.RxBytes += c.RxBytes
		d.Tx += c.Tx
		d.TxBytes += c.TxBytes
	}
}

// ClusterRun sums consecutive packets of one cluster before they are added
// to a Worker's counters, so that a batch costs a pair of atomic adds per
// run of same-cluster packets rather than per packet. The zero value is an
// empty run; a worker keeps one per direction and batch.
type ClusterRun struct {
	id           uint32
	pkts, nbytes uint64
}

// Tx counts a packet of n bytes sent to a peer of cluster id, flushing the
// run to w first when id differs from the run's.
func (r *ClusterRun) Tx(w *Worker, id uint32, n int) {
	if id != r.id && r.pkts != 0 {
		r.FlushTx(w)
	}
	r.id = id
	r.pkts++
	r.nbytes += uint64(n)
}

// Rx counts a datagram of n bytes received from a peer of cluster id.
func (r *ClusterRun) Rx(w *Worker, id uint32, n int) {
	if id != r.id && r.pkts != 0 {
		r.FlushRx(w)
	}
	r.id = id
	r.pkts++
	r.nbytes += uint64(n)
}

// FlushTx adds a run of sent packets to w and empties it.
func (r *ClusterRun) FlushTx(w *Worker) {
	if r.pkts == 0 {
		return
	}
	c := w.Cluster(r.id)
	c.Tx.Add(r.pkts)
	c.TxBytes.Add(r.nbytes)
	r.pkts, r.nbytes = 0, 0
}

// FlushRx adds a run of received datagrams to w and empties it.
func (r *ClusterRun) FlushRx(w *Worker) {
	if r.pkts == 0 {
		return
	}
	c := w.Cluster(r.id)
	c.Rx.Add(r.pkts)
	c.RxBytes.Add(r.nbytes)
	r.pkts, r.nbytes = 0, 0
}
