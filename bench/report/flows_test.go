package report

import (
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/turnclient"
)

func fl(target string, d bench.Direction, p turnclient.Proto, pc bench.Pacing, cpu time.Duration, relayed uint64, machine, base float64) bench.FlowsResult {
	return bench.FlowsResult{Target: target, FlowsStep: bench.FlowsStep{Flows: 64, Rate: 20000, Size: 100, Direction: d, Transport: p, Pacing: pc},
		Sent: relayed, Delivered: relayed, Relayed: relayed, ServerCPU: cpu, HasCPU: target != bench.Direct.Name,
		CPUPerPacketUS: float64(cpu.Microseconds()) / float64(relayed), MachineUSPerPkt: machine,
		BaselineUSPerPkt: base, NetMachineUSPerPkt: machine - base, HasMachine: true, HasBaseline: target != bench.Direct.Name}
}

// TestFlowsMarkdown: the WebRTC-shaped sections lead the page, with the
// ratios of ternd over coturn and pion, and issue 14's and issue 23's goals are judged.
func TestFlowsMarkdown(t *testing.T) {
	r := &bench.Report{
		Meta: bench.Meta{Targets: []bench.Target{{Name: Subject}, {Name: Coturn}, {Name: Pion}}},
		Flows: []bench.FlowsResult{
			fl(Subject, bench.P2C, turnclient.TLS, bench.Interleaved, 500*time.Millisecond, 100000, 12, 4),
			fl(Coturn, bench.P2C, turnclient.TLS, bench.Interleaved, time.Second, 100000, 20, 4),
			fl(Pion, bench.P2C, turnclient.TLS, bench.Interleaved, 2*time.Second, 100000, 30, 4),
			fl(bench.Direct.Name, bench.P2C, turnclient.UDP, bench.Interleaved, 0, 100000, 4, 0),
			fl(Subject, bench.C2P, turnclient.UDP, bench.Burst, 300*time.Millisecond, 100000, 8, 4),
		},
	}
	w := func(target string, cpu time.Duration, rtt99 float64) bench.WebRTCResult {
		x := bench.WebRTCResult{FlowsResult: fl(target, "webrtc", turnclient.UDP, bench.Interleaved, cpu, 400000, 10, 4),
			WebRTC: bench.NewWebRTCStep(1000, 0.1, turnclient.UDP, 20*time.Second, 40000)}
		x.Flows, x.RTTSamples, x.RTTP50US, x.RTTP99US = 1000, 100, 100, rtt99
		return x
	}
	r.WebRTC = []bench.WebRTCResult{w(Subject, 2*time.Second, 900), w(Coturn, 4*time.Second, 800)}
	b, err := Markdown(r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"| p2c | TLS | 64 flows, 20000 pps, 100 B | 5.00 | 10.00 | 20.00 | – | 0.50× | 0.25× | 0.00 · 0.00 · 0.00 |  |",
		"| p2c | TLS | 64 flows, 20000 pps, 100 B | 4.00 | 8.00 | 16.00 | 26.00 | – | 0.50× | 0.31× |",
		"| 1000 | UDP | 40000 relayed pps (×0.1 of 400000) | ternd | 5.00 | 6.00 | 0.000 | 100 | 900 | 0.50× | – |",
		"### Server CPU per relayed packet, bursts of 32 per flow",
		"| server CPU per relayed packet ≤ 0.6× coturn's, p2c, TLS, interleaved | 5.00 µs | 10.00 µs | 0.50× | met |",
		"| webrtc profile, 1,000 allocations: round-trip p99 ≤ coturn's | 900 µs | 800 µs | 1.12× | **missed** |",
		"| issue 23: server CPU per relayed packet ≤ 0.8× coturn's, p2c, TLS, interleaved | 5.00 µs | 10.00 µs | 0.50× | met |",
		"| issue 23: loss 0%, p2c, TLS, interleaved | 0.00 % | 0.00 % | – | met |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Index(md, "## WebRTC-shaped load") > strings.Index(md, "## Method") {
		t.Error("the WebRTC-shaped sections do not lead")
	}
}
