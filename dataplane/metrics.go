package dataplane

import (
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/dataplane/listener"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// writeMetrics writes the dataplane's metrics in Prometheus text format,
// under the names STUNner's dashboards and adopters query (docs/stunner-compat.md).
func (s *Server) writeMetrics(w io.Writer) {
	metrics.WriteGaugeUint64(w, "stunner_allocations_active", uint64(s.engine.Allocations()))
	var total stats.Sum
	s.listenersMu.Lock()
	for _, l := range s.listeners {
		var ls stats.Sum
		l.FoldStats(&ls)
		name := `{name="` + l.Spec().Name + `",direction=`
		metrics.WriteCounterUint64(w, "stunner_listener_packets_total"+name+`"rx"}`, ls.Rx)
		metrics.WriteCounterUint64(w, "stunner_listener_packets_total"+name+`"tx"}`, ls.Tx)
		metrics.WriteCounterUint64(w, "stunner_listener_bytes_total"+name+`"rx"}`, ls.RxBytes)
		metrics.WriteCounterUint64(w, "stunner_listener_bytes_total"+name+`"tx"}`, ls.TxBytes)
		if cs, ok := l.ConnStats(); ok {
			writeConnMetrics(w, l.Spec().Name, cs)
		}
		total.RxBytes += ls.RxBytes
		total.TxBytes += ls.TxBytes
		for i := range ls.Drops {
			total.Drops[i] += ls.Drops[i]
		}
		total.PeerTx += ls.PeerTx
		total.PeerTxBytes += ls.PeerTxBytes
	}
	s.listenersMu.Unlock()
	var rs stats.Sum
	s.relays.FoldStats(&rs)
	for i := range rs.Drops {
		total.Drops[i] += rs.Drops[i]
	}
	metrics.WriteCounterUint64(w, "stunner_bytes_received_total", total.RxBytes+rs.PeerRxBytes)
	metrics.WriteCounterUint64(w, "stunner_bytes_sent_total", total.TxBytes+total.PeerTxBytes)
	metrics.WriteCounterUint64(w, `tern_peer_packets_total{direction="rx"}`, rs.PeerRx)
	metrics.WriteCounterUint64(w, `tern_peer_packets_total{direction="tx"}`, total.PeerTx)
	metrics.WriteCounterUint64(w, `tern_peer_bytes_total{direction="rx"}`, rs.PeerRxBytes)
	metrics.WriteCounterUint64(w, `tern_peer_bytes_total{direction="tx"}`, total.PeerTxBytes)
	for i := 1; i < turn.NumDropReasons; i++ {
		metrics.WriteCounterUint64(w, `tern_dropped_packets_total{reason="`+turn.DropReason(i).String()+`"}`, total.Drops[i])
	}
	for i := range turn.NumRefusals {
		r := turn.Refusal(i)
		metrics.WriteCounterUint64(w, `tern_refused_requests_total{reason="`+r.String()+`"}`, s.engine.Refused(r))
	}
}

// writeConnMetrics writes a TCP, TLS or DTLS listener's connection counts.
func writeConnMetrics(w io.Writer, lname string, cs listener.ConnStats) {
	name := `{name="` + lname + `"`
	metrics.WriteGaugeUint64(w, "tern_listener_connections"+name+`}`, uint64(cs.Active))
	metrics.WriteCounterUint64(w, "tern_listener_connections_refused_total"+name+`,reason="per_ip"}`, cs.RefusedPerIP)
	metrics.WriteCounterUint64(w, "tern_listener_connections_refused_total"+name+`,reason="total"}`, cs.RefusedTotal)
	metrics.WriteCounterUint64(w, "tern_listener_connections_closed_total"+name+`,reason="shed"}`, cs.Shed)
	metrics.WriteCounterUint64(w, "tern_listener_connections_closed_total"+name+`,reason="idle"}`, cs.Idle)
}
