package dataplane

import (
	"io"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/turn"
)

// counter is a uint64 counter on its own cache line, so that workers
// updating different counters do not share lines.
type counter struct {
	atomic.Uint64
	_ [56]byte
}

// stats are the dataplane-wide packet counters.
type stats struct {
	peerRx, peerRxBytes counter // datagrams from peers on relay sockets
	peerTx, peerTxBytes counter // datagrams to peers
	drops               [turn.NumDropReasons]counter
}

// listenerStats are one listener's counters (STUNner's
// stunner_listener_packets_total / _bytes_total with direction rx|tx).
type listenerStats struct {
	rx, rxBytes counter
	tx, txBytes counter
}

// writeMetrics writes the dataplane's metrics in Prometheus text format.
func (s *Server) writeMetrics(w io.Writer) {
	metrics.WriteGaugeUint64(w, "stunner_allocations_active", uint64(s.engine.Allocations()))
	var rxBytes, txBytes uint64
	s.listenersMu.Lock()
	for _, l := range s.listeners {
		st := &l.stats
		name := `{name="` + l.cfg.Name + `",direction=`
		metrics.WriteCounterUint64(w, "stunner_listener_packets_total"+name+`"rx"}`, st.rx.Load())
		metrics.WriteCounterUint64(w, "stunner_listener_packets_total"+name+`"tx"}`, st.tx.Load())
		metrics.WriteCounterUint64(w, "stunner_listener_bytes_total"+name+`"rx"}`, st.rxBytes.Load())
		metrics.WriteCounterUint64(w, "stunner_listener_bytes_total"+name+`"tx"}`, st.txBytes.Load())
		rxBytes += st.rxBytes.Load()
		txBytes += st.txBytes.Load()
	}
	s.listenersMu.Unlock()
	metrics.WriteCounterUint64(w, "stunner_bytes_received_total", rxBytes+s.stats.peerRxBytes.Load())
	metrics.WriteCounterUint64(w, "stunner_bytes_sent_total", txBytes+s.stats.peerTxBytes.Load())
	metrics.WriteCounterUint64(w, `tern_peer_packets_total{direction="rx"}`, s.stats.peerRx.Load())
	metrics.WriteCounterUint64(w, `tern_peer_packets_total{direction="tx"}`, s.stats.peerTx.Load())
	for i := 1; i < turn.NumDropReasons; i++ {
		metrics.WriteCounterUint64(w, `tern_dropped_packets_total{reason="`+turn.DropReason(i).String()+`"}`, s.stats.drops[i].Load())
	}
}
