package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// The webrtc profile's flow shapes: every allocation is a participant
// behind an SFU (the peer) sending audio, some also video; the SFU sends
// each participant three times the packets it sends (the other speakers'
// media), as the echo of each upstream packet (which times the round trip)
// plus two more of the same size.
const (
	AudioPPS   = 50
	AudioSize  = 160
	VideoPPS   = 500
	VideoSize  = 1100
	DownFactor = 3
)

// WebRTCStep is one point of the webrtc profile.
type WebRTCStep struct {
	// Allocations K, each its own client transport.
	Allocations int `json:"allocations"`
	// VideoShare of the allocations also send video (0.1: every tenth).
	VideoShare float64          `json:"video_share"`
	Transport  turnclient.Proto `json:"transport"`
	Duration   time.Duration    `json:"duration_ns"`
	// MaxPPS caps the relayed packets/s (upstream and downstream) the
	// profile offers: every flow's rate is scaled by Scale =
	// min(1, MaxPPS/NominalPPS), keeping the shape (mix, sizes, 3×
	// downstream) when K flows at full rate are more than the machine can
	// carry. 0: no cap.
	MaxPPS int `json:"max_pps"`
	// NominalPPS is the relayed packets/s at full rate, Scale the factor
	// applied, UpstreamPPS the clients' packets/s after scaling.
	NominalPPS  float64 `json:"nominal_pps"`
	Scale       float64 `json:"scale"`
	UpstreamPPS float64 `json:"upstream_pps"`
}

// NewWebRTCStep fills in the derived rates of a step.
func NewWebRTCStep(k int, videoShare float64, p turnclient.Proto, dur time.Duration, maxPPS int) WebRTCStep {
	st := WebRTCStep{Allocations: k, VideoShare: videoShare, Transport: p, Duration: dur, MaxPPS: maxPPS}
	up := float64(k*AudioPPS) + float64(videoCount(k, videoShare)*VideoPPS)
	st.NominalPPS = up * (1 + DownFactor)
	st.Scale = 1
	if maxPPS > 0 && st.NominalPPS > float64(maxPPS) {
		st.Scale = float64(maxPPS) / st.NominalPPS
	}
	st.UpstreamPPS = up * st.Scale
	return st
}

func (s WebRTCStep) String() string {
	return fmt.Sprintf("webrtc K=%d %s video %.0f%% ×%.3g", s.Allocations, s.Transport, 100*s.VideoShare, s.Scale)
}

// hasVideo spreads the video allocations evenly over the K.
func hasVideo(i int, share float64) bool {
	return math.Floor(float64(i+1)*share) > math.Floor(float64(i)*share)
}

func videoCount(k int, share float64) int {
	n := 0
	for i := range k {
		if hasVideo(i, share) {
			n++
		}
	}
	return n
}

// WebRTCResult is one target measured at one webrtc step: the flows
// figures (Sent and Delivered count both directions) and the step.
type WebRTCResult struct {
	FlowsResult
	WebRTC WebRTCStep `json:"webrtc"`
}

// plan is the schedule: a cycle of VideoPPS/AudioPPS rounds, every
// allocation's audio packet in the first, every video allocation's video
// packet in each, spread evenly over the cycle's time.
func (s WebRTCStep) plan() (flowPlan, []int) {
	pl := flowPlan{flows: s.Allocations, rate: s.UpstreamPPS, dur: s.Duration, pacing: Interleaved,
		proto: s.Transport, upstream: true, copies: DownFactor, rtt: true}
	pl.limit = uint64(s.UpstreamPPS * s.Duration.Seconds())
	for round := range VideoPPS / AudioPPS {
		for i := range s.Allocations {
			if round == 0 {
				pl.slots = append(pl.slots, slot{f: int32(i), k: 0})
			}
			if hasVideo(i, s.VideoShare) {
				pl.slots = append(pl.slots, slot{f: int32(i), k: 1})
			}
		}
	}
	return pl, []int{AudioSize, VideoSize}
}

// MeasureWebRTC runs one webrtc step against one target.
func MeasureWebRTC(ctx context.Context, t Target, st WebRTCStep) WebRTCResult {
	pl, sizes := st.plan()
	res := WebRTCResult{FlowsResult: measureFlows(ctx, t, pl, sizes), WebRTC: st}
	res.Flows, res.Rate, res.Transport, res.Duration = st.Allocations, int(st.UpstreamPPS), st.Transport, st.Duration
	res.Direction, res.Pacing = "webrtc", Interleaved
	return res
}

// WebRTC measures every step against every target (and the Direct
// baseline when baseline is set) and applies the baseline.
func (r *Runner) WebRTC(ctx context.Context, steps []WebRTCStep, baseline bool) []WebRTCResult {
	rr := *r
	if baseline {
		rr.Targets = append(slices.Clone(r.Targets), Direct)
	}
	out := each(ctx, &rr, "webrtc", steps, func(t Target, s WebRTCStep, rep int) WebRTCResult {
		if _, ok := t.AddrFor(s.Transport); t.Kind != KindDirect && !ok {
			return WebRTCResult{FlowsResult: FlowsResult{Err: "skip"}}
		}
		res := MeasureWebRTC(ctx, t, s)
		res.Repeat = rep
		return res
	})
	out = slices.DeleteFunc(out, func(r WebRTCResult) bool { return r.Err == "skip" })
	fr := make([]FlowsResult, len(out))
	for i := range out {
		fr[i] = out[i].FlowsResult
		fr[i].Size = out[i].WebRTC.Allocations // keys steps apart for ApplyBaseline
	}
	ApplyBaseline(fr)
	for i := range out {
		out[i].BaselineUSPerPkt, out[i].NetMachineUSPerPkt, out[i].HasBaseline =
			fr[i].BaselineUSPerPkt, fr[i].NetMachineUSPerPkt, fr[i].HasBaseline
	}
	return out
}
