package report

import (
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/turnclient"
)

// TestTLS443Markdown: the shared-port section shows ternd-443 against ternd
// per TURN-TLS step (medians over repeats, the ratio) and the HTTPS paths
// with direct first and no server CPU for it; without the option there is
// no section.
func TestTLS443Markdown(t *testing.T) {
	main := &bench.Report{Flows: []bench.FlowsResult{
		fl("ternd", bench.C2P, turnclient.UDP, bench.Interleaved, 10*time.Millisecond, 1000, 20, 5),
	}}
	shared := &bench.Report{
		Flows: []bench.FlowsResult{
			fl("ternd", bench.C2P, turnclient.TLS, bench.Interleaved, 20*time.Millisecond, 1000, 40, 5),
			fl(Shared443, bench.C2P, turnclient.TLS, bench.Interleaved, 22*time.Millisecond, 1000, 42, 5),
			fl("ternd", bench.C2P, turnclient.TLS, bench.Interleaved, 30*time.Millisecond, 1000, 40, 5),
			fl(Shared443, bench.C2P, turnclient.TLS, bench.Interleaved, 30*time.Millisecond, 1000, 42, 5),
		},
		HTTPS443: []bench.HTTPS443Result{
			{Path: Shared443, Conns: 300, ConnP50: 1600, ConnP99: 3000, ConnsPerSec: 500, DownloadMBps: 300, ServerCPUPerConn: 450, ServerCPUPerMB: 1.5},
			{Path: "direct", Conns: 300, ConnP50: 1300, ConnP99: 2500, ConnsPerSec: 650, DownloadMBps: 320},
		},
	}
	shared.Flows[2].Repeat, shared.Flows[3].Repeat = 1, 1
	md, err := Markdown(main, Options{TLS443: shared})
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	for _, want := range []string{
		"## TURN-TLS and HTTPS on one port (issue 23)",
		"| c2p tls interleaved N=64 100B 20000pps | 25.00 | 26.00 | 1.04× |",
		"| direct | 300 | 1300 | 2500 | 650 | – | 320 | – |",
		"| ternd-443 | 300 | 1600 | 3000 | 500 | 450 | 300 | 1.50 |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Index(s, "| direct | 300") > strings.Index(s, "| ternd-443 | 300") {
		t.Error("direct is not the first HTTPS row")
	}
	md, err = Markdown(main, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(md), "on one port") {
		t.Error("a section on one port without its results")
	}
}
