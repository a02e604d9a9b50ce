// Package stats holds the dataplane's per-worker packet counters. Each
// listener and relay worker owns a Worker and is its only writer; /metrics
// folds them into a Sum when scraped. Writes are atomic so that a scrape
// can read them, and each Worker is padded to its own cache lines, so no
// counter is shared between workers on the packet path.
package stats

import (
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
	_     [64]byte
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
}

// Sum is a fold of Workers at one scrape.
type Sum struct {
	Rx, RxBytes, Tx, TxBytes                 uint64
	PeerRx, PeerRxBytes, PeerTx, PeerTxBytes uint64
	Drops                                    [turn.NumDropReasons]uint64
}
