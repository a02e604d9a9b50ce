package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// PrintTable writes every result of r as aligned text tables, one row per
// measurement (repeats included, so the spread is visible).
func PrintTable(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	defer tw.Flush()
	if len(r.Flows) > 0 {
		fmt.Fprintln(tw, "flows\ttarget\tstep\trep\tsent\tdelivered pps\tloss %\tserver µs/pkt\tmachine µs/pkt\tbaseline\tnet machine\tRTT p50 µs\tp99 µs\t")
		for _, x := range r.Flows {
			flowRow(tw, x.Target, x.FlowsStep.String(), x)
		}
		fmt.Fprintln(tw)
	}
	if len(r.WebRTC) > 0 {
		fmt.Fprintln(tw, "webrtc\ttarget\tstep\trep\tsent\tdelivered pps\tloss %\tserver µs/pkt\tmachine µs/pkt\tbaseline\tnet machine\tRTT p50 µs\tp99 µs\t")
		for _, x := range r.WebRTC {
			flowRow(tw, x.Target, x.WebRTC.String(), x.FlowsResult)
		}
		fmt.Fprintln(tw)
	}
	if len(r.Throughput) > 0 {
		fmt.Fprintln(tw, "throughput\ttarget\tstep\trep\tsent pps\tdelivered pps\tloss %\tCPU µs/pkt\t")
		for _, x := range r.Throughput {
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%s\t%s\n", x.Target, x.ThroughputStep, x.Repeat,
				x.SentPPS, x.DeliveredPPS, x.LossPct, cpuCell(x.HasCPU, x.CPUPerPacketUS), errCell(x.Err))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Latency) > 0 {
		fmt.Fprintln(tw, "latency\ttarget\tstep\trep\tsent\tloss %\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\t")
		for _, x := range r.Latency {
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\n", x.Target, x.LatencyStep, x.Repeat,
				x.Sent, x.LossPct, x.P50US, x.P90US, x.P99US, x.P999US, errCell(x.Err))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Allocs) > 0 {
		fmt.Fprintln(tw, "allocs\ttarget\tstep\trep\tdone\tfailed\tallocs/s\tcycle p50 µs\tCPU µs/alloc\t")
		for _, x := range r.Allocs {
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%s\t%s\n", x.Target, x.AllocsStep, x.Repeat,
				x.Done, x.Failed, x.PerSec, x.CycleP50US, cpuCell(x.HasCPU, x.CPUPerAllocUS), errCell(x.Err))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Memory) > 0 {
		fmt.Fprintln(tw, "memory\ttarget\tstep\trep\theld\tRSS0 MiB\tRSSK MiB\tbytes/alloc\t")
		for _, x := range r.Memory {
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.0f\t%s\n", x.Target, x.MemoryStep, x.Repeat,
				x.Held, float64(x.RSS0)/(1<<20), float64(x.RSSK)/(1<<20), x.PerAllocBytes, errCell(x.Err))
		}
		fmt.Fprintln(tw)
	}
}

func flowRow(w io.Writer, target, step string, x FlowsResult) {
	base, net := "-", "-"
	if x.HasBaseline {
		base, net = fmt.Sprintf("%.2f", x.BaselineUSPerPkt), fmt.Sprintf("%.2f", x.NetMachineUSPerPkt)
	}
	rtt50, rtt99 := "-", "-"
	if x.RTTSamples > 0 {
		rtt50, rtt99 = fmt.Sprintf("%.0f", x.RTTP50US), fmt.Sprintf("%.0f", x.RTTP99US)
	}
	fmt.Fprintf(w, "\t%s\t%s\t%d\t%d\t%.0f\t%.2f\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\n", target, step, x.Repeat,
		x.Sent, x.DeliveredPPS, x.LossPct, cpuCell(x.HasCPU && x.Relayed > 0, x.CPUPerPacketUS), x.MachineUSPerPkt,
		base, net, rtt50, rtt99, errCell(x.Err))
}

func cpuCell(ok bool, v float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func errCell(e string) string {
	if e == "" {
		return ""
	}
	if len(e) > 60 {
		e = e[:60] + "…"
	}
	return "error: " + e
}
