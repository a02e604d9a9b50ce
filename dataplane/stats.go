package dataplane

import (
	"io"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/turn"
)

// workerStats are one worker's packet counters. Only the owning worker
// writes them (atomically, so /metrics can read them), and each worker's
// set sits on its own cache lines: no counter is shared between workers.
type workerStats struct {
	_                   [64]byte
	rx, rxBytes         atomic.Uint64 // from clients
	tx, txBytes         atomic.Uint64 // to clients
	peerRx, peerRxBytes atomic.Uint64 // from peers, on relay sockets
	peerTx, peerTxBytes atomic.Uint64 // to peers
	drops               [turn.NumDropReasons]atomic.Uint64
	_                   [64]byte
}

func (w *workerStats) addTo(sum *statsSum) {
	sum.rx += w.rx.Load()
	sum.rxBytes += w.rxBytes.Load()
	sum.tx += w.tx.Load()
	sum.txBytes += w.txBytes.Load()
	sum.peerRx += w.peerRx.Load()
	sum.peerRxBytes += w.peerRxBytes.Load()
	sum.peerTx += w.peerTx.Load()
	sum.peerTxBytes += w.peerTxBytes.Load()
	for i := range w.drops {
		sum.drops[i] += w.drops[i].Load()
	}
}

// statsSum is a fold of workerStats.
type statsSum struct {
	rx, rxBytes, tx, txBytes, peerRx, peerRxBytes, peerTx, peerTxBytes uint64
	drops                                                              [turn.NumDropReasons]uint64
}

// writeMetrics writes the dataplane's metrics in Prometheus text format,
// under the names STUNner's dashboards and the seeds' adopters query.
func (s *Server) writeMetrics(w io.Writer) {
	metrics.WriteGaugeUint64(w, "stunner_allocations_active", uint64(s.engine.Allocations()))
	var total statsSum
	s.listenersMu.Lock()
	for _, l := range s.listeners {
		var ls statsSum
		l.foldStats(&ls)
		name := `{name="` + l.spec().Name + `",direction=`
		metrics.WriteCounterUint64(w, "stunner_listener_packets_total"+name+`"rx"}`, ls.rx)
		metrics.WriteCounterUint64(w, "stunner_listener_packets_total"+name+`"tx"}`, ls.tx)
		metrics.WriteCounterUint64(w, "stunner_listener_bytes_total"+name+`"rx"}`, ls.rxBytes)
		metrics.WriteCounterUint64(w, "stunner_listener_bytes_total"+name+`"tx"}`, ls.txBytes)
		total.rxBytes += ls.rxBytes
		total.txBytes += ls.txBytes
		for i := range ls.drops {
			total.drops[i] += ls.drops[i]
		}
		total.peerTx += ls.peerTx
		total.peerTxBytes += ls.peerTxBytes
	}
	s.listenersMu.Unlock()
	var rs statsSum
	s.relays.io.foldStats(&rs)
	for i := range rs.drops {
		total.drops[i] += rs.drops[i]
	}
	metrics.WriteCounterUint64(w, "stunner_bytes_received_total", total.rxBytes+rs.peerRxBytes)
	metrics.WriteCounterUint64(w, "stunner_bytes_sent_total", total.txBytes+total.peerTxBytes)
	metrics.WriteCounterUint64(w, `tern_peer_packets_total{direction="rx"}`, rs.peerRx)
	metrics.WriteCounterUint64(w, `tern_peer_packets_total{direction="tx"}`, total.peerTx)
	metrics.WriteCounterUint64(w, `tern_peer_bytes_total{direction="rx"}`, rs.peerRxBytes)
	metrics.WriteCounterUint64(w, `tern_peer_bytes_total{direction="tx"}`, total.peerTxBytes)
	for i := 1; i < turn.NumDropReasons; i++ {
		metrics.WriteCounterUint64(w, `tern_dropped_packets_total{reason="`+turn.DropReason(i).String()+`"}`, total.drops[i])
	}
}
