package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Goals of a soak (issue 13's "Done when"): every legitimate client relays with less than 1%
// loss, and the server's memory stays bounded: below MaxRSS (the default Dataplane's memory
// limit) and, over the second half of the run, growing by less than RSSGrowth.
const (
	MaxLoss   = 0.01
	MaxRSS    = 512 << 20
	RSSGrowth = 0.10
)

// Failures returns the goals r missed, each as a sentence; none means the run passed.
func (r *Result) Failures() []string {
	var out []string
	l := r.Legit
	if l.AllocFailed > 0 {
		out = append(out, fmt.Sprintf("%d of %d legitimate clients could not allocate (first: %s)",
			l.AllocFailed, r.Config.Allocations, strings.Join(l.AllocErrors, "; ")))
	}
	if l.ClientsOver1Pct > 0 {
		out = append(out, fmt.Sprintf("%d legitimate clients lost 1%% or more (worst %.2f%%, %d received nothing)",
			l.ClientsOver1Pct, 100*l.MaxClientLoss, l.Silent))
	}
	budget := r.Config.rssBudget()
	if peak := r.PeakRSS(); peak > budget {
		out = append(out, fmt.Sprintf("server RSS peaked at %.1f MB, above %d MiB", float64(peak)/1e6, budget>>20))
	}
	// With attacks, RSS follows the attack of the moment (one after another), so the growth
	// check would compare one attack with another; the budget above still holds.
	if first, second := r.halfPeaks(); len(r.Attacks) == 0 && first > 0 && float64(second) > float64(first)*(1+RSSGrowth) {
		out = append(out, fmt.Sprintf("server RSS still growing: peak %.1f MB in the first half of the run, %.1f MB in the second",
			float64(first)/1e6, float64(second)/1e6))
	}
	if len(r.Attacks) < len(r.Config.Attacks) {
		out = append(out, fmt.Sprintf("only %d of the %d attacks ran", len(r.Attacks), len(r.Config.Attacks)))
	}
	for _, a := range r.Attacks {
		for _, f := range a.Failures {
			out = append(out, fmt.Sprintf("attack %s (item %d): %s", a.Name, a.Item, f))
		}
		if a.PeakRSS > budget {
			out = append(out, fmt.Sprintf("attack %s (item %d): server RSS peaked at %.1f MB, above %d MiB", a.Name, a.Item, float64(a.PeakRSS)/1e6, budget>>20))
		}
	}
	return out
}

// PeakRSS is the highest RSS sampled.
func (r *Result) PeakRSS() int64 {
	var m int64
	for _, s := range r.Samples {
		m = max(m, s.RSS)
	}
	return m
}

// halfPeaks returns the peak RSS of the first and the second half of the run (the last
// sample, taken after the clients left, is left out).
func (r *Result) halfPeaks() (first, second int64) {
	samples := r.Samples
	if len(samples) > 1 {
		samples = samples[:len(samples)-1]
	}
	half := r.Config.Duration / 2
	for _, s := range samples {
		if s.At < half {
			first = max(first, s.RSS)
		} else {
			second = max(second, s.RSS)
		}
	}
	return first, second
}

// WriteJSON writes r to path.
func (r *Result) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSummary writes r as Markdown: the figures docs/security.md quotes, the time series
// (one row per minute or so) and the verdict.
func (r *Result) WriteSummary(w io.Writer) {
	c, l := r.Config, r.Legit
	parts := []string{fmt.Sprintf("%d legitimate allocations", c.Allocations)}
	if c.QuotaRate > 0 {
		parts = append(parts, "quota attacker")
	}
	if c.FloodRate > 0 {
		parts = append(parts, fmt.Sprintf("%d/s wrong-password flood", c.FloodRate))
	}
	if c.IdleConns > 0 {
		parts = append(parts, fmt.Sprintf("%d idle TCP connections", c.IdleConns))
	}
	if len(c.Attacks) > 0 {
		parts = append(parts, "attacks "+strings.Join(c.Attacks, ", "))
	}
	fmt.Fprintf(w, "## Soak: %v, %s\n\n", r.Elapsed.Round(time.Second), strings.Join(parts, ", "))
	fmt.Fprintf(w, "| what | figure |\n|---|---|\n")
	fmt.Fprintf(w, "| legitimate clients allocated | %d of %d in %v (%d per source address) |\n", l.Allocated, c.Allocations, l.AllocTime.Round(time.Millisecond), c.PerIP)
	fmt.Fprintf(w, "| legitimate datagrams | %d sent, %d echoed back, loss %.3f%% |\n", l.Sent, l.Received, 100*l.Loss)
	fmt.Fprintf(w, "| worst client's loss | %.2f%% (%d clients at 1%% or more, %d received nothing; the fewest datagrams a client sent: %d) |\n",
		100*l.MaxClientLoss, l.ClientsOver1Pct, l.Silent, l.MinClientSent)
	fmt.Fprintf(w, "| round trip (client, server, peer and back) | p50 %v, p99 %v, max %v |\n", l.RTTp50, l.RTTp99, l.RTTMax.Round(time.Microsecond))
	fmt.Fprintf(w, "| pion/turn warnings while relaying (failed refreshes, binds) | %d %s; %d more while closing |\n",
		l.PionWarnings, quoteFew(l.PionMessages), l.PionWarningsAtClose)
	if where := r.lossPath(); where != "" {
		fmt.Fprintf(w, "| where legitimate datagrams were lost | %s |\n", where)
	}
	if q := r.Quota; c.QuotaRate > 0 {
		fmt.Fprintf(w, "| quota attacker (one user, one address) | held %d, first refusal after %v; refusals by code %v; %d unanswered |\n",
			q.Held, q.TimeToQuota.Round(time.Millisecond), q.Refused, q.Timeouts)
	}
	if f := r.Flood; c.FloodRate > 0 {
		fmt.Fprintf(w, "| wrong-password flood (one address) | %d sent, answered by code %v (%d nonce fetches) |\n", f.Sent, f.Answered, f.Nonces)
	}
	if cs := r.Conns; c.IdleConns > 0 {
		fmt.Fprintf(w, "| idle TCP connections (%d per address, Binding every %v) | held %d-%d after the ramp; %d opened, %d closed by the server, %d failed |\n",
			c.ConnsPerIP, c.KeepAlive, cs.HeldMin, cs.HeldMax, cs.Opened, cs.Closed, cs.Failed)
	}
	if len(r.Samples) > 0 {
		first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
		fmt.Fprintf(w, "| server RSS | %.1f MB before, peak %.1f MB, %.1f MB after the clients left |\n",
			float64(first.RSS)/1e6, float64(r.PeakRSS())/1e6, float64(last.RSS)/1e6)
	}
	keys := make([]string, 0, len(r.Server))
	for k, v := range r.Server {
		if v != 0 && !strings.HasPrefix(k, "stunner_allocations") && !strings.HasPrefix(k, "tern_listener_connections{") &&
			!strings.HasPrefix(k, "tern_peer_packets") && !strings.HasPrefix(k, "stunner_listener_packets") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "| server `%s` | %.0f |\n", k, r.Server[k])
	}

	if len(r.Attacks) > 0 {
		fmt.Fprintf(w, "\n| item | attack | from | s | figures | RSS MB before, peak | goroutines before, peak | descriptors peak | verdict |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, a := range r.Attacks {
			verdict := "passed"
			if len(a.Failures) > 0 || a.PeakRSS > c.rssBudget() {
				verdict = "FAILED"
			}
			fmt.Fprintf(w, "| %d | %s | %.0f s | %.1f | %s | %.1f, %.1f | %.0f, %.0f | %d | %s |\n", a.Item, a.Name, a.Start.Seconds(),
				(a.End - a.Start).Seconds(), a.Summary, float64(a.BaseRSS)/1e6, float64(a.PeakRSS)/1e6,
				a.BaseGoroutines, a.PeakGoroutines, a.PeakFDs, verdict)
		}
	}

	fmt.Fprintf(w, "\n| time | RSS MB | CPU | allocations (server) | TCP conns (server) | legit sent | legit loss | flood sent / answered |\n|---|---|---|---|---|---|---|---|\n")
	every := max(1, int(time.Minute/c.SampleEvery))
	var prev Sample
	for i, s := range r.Samples {
		if i%every != 0 && i != len(r.Samples)-1 {
			continue
		}
		sent, rcv := s.LegitSent-prev.LegitSent, s.LegitReceived-prev.LegitReceived
		loss := 0.0
		if sent > 0 {
			loss = 100 * (1 - float64(min(rcv, sent))/float64(sent))
		}
		fmt.Fprintf(w, "| %.0f s | %.1f | %.0f%% | %.0f | %.0f | %d | %.3f%% | %d / %d |\n", s.At.Seconds(), float64(s.RSS)/1e6, 100*s.CPU,
			s.Server["stunner_allocations_active"], s.Server[`tern_listener_connections{name="tcp"}`], sent, loss, s.FloodSent, s.FloodAnswered)
		prev = s
	}
	if fs := r.Failures(); len(fs) > 0 {
		fmt.Fprintf(w, "\nFAILED:\n")
		for _, f := range fs {
			fmt.Fprintf(w, "- %s\n", f)
		}
	} else {
		fmt.Fprintf(w, "\nPASSED: every legitimate client below %.0f%% loss, RSS below %d MiB", 100*MaxLoss, c.rssBudget()>>20)
		if len(r.Attacks) > 0 {
			fmt.Fprintf(w, ", every attack's goals met.\n")
		} else {
			fmt.Fprintf(w, " and flat.\n")
		}
	}
}

// lossPath follows the legitimate datagrams through the last sample's counters: sent by the
// clients, relayed to the peer by the server, received by the peer (which echoes each), read
// back from the peer by the server, received by the clients; and the datagrams the kernel
// dropped on full receive buffers, the server's sockets and this process's. The server's peer
// counters hold only legitimate traffic: the attackers relay nothing.
func (r *Result) lossPath() string {
	if len(r.Samples) == 0 {
		return ""
	}
	first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
	m := last.Server
	if m == nil {
		return ""
	}
	toPeer, fromPeer := uint64(m[`tern_peer_packets_total{direction="tx"}`]), uint64(m[`tern_peer_packets_total{direction="rx"}`])
	return fmt.Sprintf("clients sent %d, server relayed %d to the peer, peer received %d, server read %d back, clients received %d; "+
		"kernel drops on full receive buffers: server %d, ternbench (clients and peer) %d",
		r.Legit.Sent, toPeer, last.PeerReceived, fromPeer, r.Legit.Received,
		last.ServerUDPDrops-first.ServerUDPDrops, last.SelfUDPDrops-first.SelfUDPDrops)
}

func quoteFew(msgs []string) string {
	if len(msgs) == 0 {
		return ""
	}
	return "(first: " + strings.Join(msgs[:min(3, len(msgs))], "; ") + ")"
}
