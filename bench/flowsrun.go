package bench

import (
	"context"
	"slices"

	"github.com/tern-gw/tern/bench/turnclient"
)

// Direct is the baseline target of the flows tests (KindDirect): the same
// generator and peer with no server between them.
var Direct = Target{Name: "direct", Kind: KindDirect,
	Description: "no server: the generator's clients and the peer exchange the same packets directly over UDP (the whole-machine CPU baseline)"}

// plan turns a step into what measureFlows sends: one frame kind of
// st.Size bytes, every flow once per round.
func (st FlowsStep) plan() (flowPlan, []int) {
	pl := flowPlan{flows: st.Flows, rate: float64(st.Rate), dur: st.Duration, pacing: st.Pacing, proto: st.Transport, gso: st.GSO}
	pl.limit = uint64(float64(st.Rate) * st.Duration.Seconds())
	if st.MaxPackets > 0 {
		pl.limit = min(pl.limit, uint64(st.MaxPackets))
	}
	for i := range st.Flows {
		pl.slots = append(pl.slots, slot{f: int32(i)})
	}
	switch st.Direction {
	case C2P:
		pl.upstream = true
	case P2C:
		pl.peerSend = true
	case Both:
		pl.upstream, pl.copies, pl.rtt = true, 1, true
	}
	return pl, []int{st.Size}
}

// MeasureFlows runs one flows step against one target (KindDirect for the
// baseline). The forwarder and the baseline relay UDP only; over the other
// transports the baseline is still UDP (the servers' client leg is what
// it leaves out).
func MeasureFlows(ctx context.Context, t Target, st FlowsStep) FlowsResult {
	if err := st.CheckGSO(); err != nil {
		return FlowsResult{Target: t.Name, FlowsStep: st, Err: err.Error()}
	}
	pl, sizes := st.plan()
	res := measureFlows(ctx, t, pl, sizes)
	res.FlowsStep = st
	return res
}

// Flows measures every step against every target able to serve its
// transport, and the Direct baseline with them when baseline is set (in
// the same interleaved order), then subtracts each step and repeat's
// baseline from the targets' whole-machine CPU per packet.
func (r *Runner) Flows(ctx context.Context, steps []FlowsStep, baseline bool) []FlowsResult {
	rr := *r
	if baseline {
		rr.Targets = append(slices.Clone(r.Targets), Direct)
	}
	// The baseline is UDP whatever the transport: measured once per step
	// that differs only in transport.
	hasUDP := map[FlowsStep]bool{}
	for _, s := range steps {
		if s.Transport == turnclient.UDP {
			s.Transport = ""
			hasUDP[s] = true
		}
	}
	type once struct {
		s   FlowsStep
		rep int
	}
	seen := map[once]bool{}
	out := each(ctx, &rr, "flows", steps, func(t Target, s FlowsStep, rep int) FlowsResult {
		if t.Kind == KindDirect {
			k := s
			k.Transport = ""
			if (s.Transport != turnclient.UDP && hasUDP[k]) || seen[once{k, rep}] {
				return FlowsResult{Err: "skip: baseline measured"}
			}
			seen[once{k, rep}] = true
		}
		if _, ok := t.AddrFor(s.Transport); t.Kind != KindDirect && !ok {
			return FlowsResult{Target: t.Name, FlowsStep: s, Repeat: rep, Err: "skip: no " + string(s.Transport) + " listener"}
		}
		res := MeasureFlows(ctx, t, s)
		res.Repeat = rep
		return res
	})
	out = slices.DeleteFunc(out, func(r FlowsResult) bool { return len(r.Err) > 4 && r.Err[:5] == "skip:" })
	ApplyBaseline(out)
	return out
}

// ApplyBaseline fills BaselineUSPerPkt and NetMachineUSPerPkt of every
// result from the "direct" result with the same step and repeat.
func ApplyBaseline(rs []FlowsResult) {
	type key struct {
		st  FlowsStep
		rep int
	}
	base := map[key]float64{}
	for _, r := range rs {
		if r.Target == Direct.Name && r.Err == "" && r.HasMachine {
			st := r.FlowsStep
			st.Transport = "" // the baseline is UDP whatever the step's transport
			base[key{st, r.Repeat}] = r.MachineUSPerPkt
		}
	}
	for i := range rs {
		st := rs[i].FlowsStep
		st.Transport = ""
		if b, ok := base[key{st, rs[i].Repeat}]; ok && rs[i].Target != Direct.Name && rs[i].HasMachine {
			rs[i].BaselineUSPerPkt, rs[i].HasBaseline = b, true
			rs[i].NetMachineUSPerPkt = rs[i].MachineUSPerPkt - b
		}
	}
}
