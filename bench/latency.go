package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/tern-gw/tern/bench/stats"
)

// LatencyStep is one round-trip latency measurement.
type LatencyStep struct {
	// Clients send in turn, Rate probes per second in all, each probe a
	// Size-byte payload (at least 16) through the echoing peer and back.
	Clients  int           `json:"clients"`
	Rate     int           `json:"rate_pps"`
	Size     int           `json:"size_bytes"`
	Mode     Mode          `json:"mode"`
	Duration time.Duration `json:"duration_ns"`
	// MaxPackets bounds the probes sent.
	MaxPackets int `json:"max_packets"`
}

func (s LatencyStep) String() string {
	return fmt.Sprintf("N=%d %dB %s %dpps", s.Clients, s.Size, s.Mode, s.Rate)
}

// LatencyResult is one target's round-trip times at one step, in µs.
type LatencyResult struct {
	Target string `json:"target"`
	LatencyStep
	Repeat   int     `json:"repeat"`
	Sent     uint64  `json:"sent"`
	Received uint64  `json:"received"`
	LossPct  float64 `json:"loss_pct"`
	P50US    float64 `json:"p50_us"`
	P90US    float64 `json:"p90_us"`
	P99US    float64 `json:"p99_us"`
	P999US   float64 `json:"p999_us"`
	MaxUS    float64 `json:"max_us"`
	Err      string  `json:"error,omitempty"`
}

// MeasureLatency runs one latency step against one target through the echo
// peer. Probes leave on a fixed schedule (not after the previous reply), so
// a slow reply does not hide the ones queued behind it.
func MeasureLatency(ctx context.Context, t Target, st LatencyStep, peers Peers) LatencyResult {
	res := LatencyResult{Target: t.Name, LatencyStep: st}
	st.Size = max(st.Size, stampLen)
	ss, err := openSessions(t, st.Clients, peers.Echo.Addr(), st.Mode, st.Size)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer closeSessions(ss)
	limit := int(float64(st.Rate) * st.Duration.Seconds())
	if st.MaxPackets > 0 {
		limit = min(limit, st.MaxPackets)
	}
	var rx receivers
	base := time.Now()
	rx.start(ss, limit, base)
	interval := time.Second / time.Duration(max(st.Rate, 1))
	for seq := 0; seq < limit && ctx.Err() == nil; seq++ {
		due := base.Add(time.Duration(seq) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		s := ss[seq%len(ss)]
		stamp := s.frame[s.payloadAt:]
		binary.BigEndian.PutUint64(stamp, uint64(seq))
		binary.BigEndian.PutUint64(stamp[8:], uint64(time.Since(base).Nanoseconds()))
		if _, err := s.uc.WriteToUDPAddrPort(s.frame, t.Addr); err == nil {
			res.Sent++
		}
	}
	settle(rx.received.Load)
	rx.stop(ss)

	rtts := make([]int64, 0, limit)
	for i := range rx.rtts {
		if v := rx.rtts[i].Load(); v > 0 {
			rtts = append(rtts, v)
		}
	}
	slices.Sort(rtts)
	res.Received = uint64(len(rtts))
	if res.Sent > 0 {
		res.LossPct = 100 * float64(res.Sent-min(res.Received, res.Sent)) / float64(res.Sent)
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	res.P50US, res.P90US = us(stats.Percentile(rtts, 50)), us(stats.Percentile(rtts, 90))
	res.P99US, res.P999US = us(stats.Percentile(rtts, 99)), us(stats.Percentile(rtts, 99.9))
	if len(rtts) > 0 {
		res.MaxUS = us(rtts[len(rtts)-1])
	}
	return res
}
