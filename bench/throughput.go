package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tern-gw/tern/bench/peer"
)

// ThroughputStep is one load point of the throughput test.
type ThroughputStep struct {
	// Clients is the number of TURN clients, each on its own source port.
	Clients int `json:"clients"`
	// Rate is the offered load of all clients together, packets/s.
	Rate int `json:"rate_pps"`
	// Size is the payload per packet in bytes (TURN framing comes on top).
	Size int  `json:"size_bytes"`
	Mode Mode `json:"mode"`
	// Echo sends packets to an echoing peer and counts them back at the
	// clients (each packet crosses the server twice); otherwise the peer
	// is a sink and packets cross once.
	Echo bool `json:"echo"`
	// Duration bounds the sending phase.
	Duration time.Duration `json:"duration_ns"`
	// MaxPackets bounds the packets offered.
	MaxPackets int `json:"max_packets"`
	// Senders is the number of sending goroutines.
	Senders int `json:"senders"`
}

func (s ThroughputStep) String() string {
	echo := "sink"
	if s.Echo {
		echo = "echo"
	}
	return fmt.Sprintf("N=%d %dB %s %s %dpps", s.Clients, s.Size, s.Mode, echo, s.Rate)
}

// ThroughputResult is one target measured at one step.
type ThroughputResult struct {
	Target string `json:"target"`
	ThroughputStep
	Repeat int `json:"repeat"`
	// Sent is the packets the clients sent; Delivered the ones that reached
	// their final receiver (the sink, or back at the clients in echo mode);
	// Relayed the packets the server forwarded (the sink's count, plus the
	// clients' in echo mode), which CPU time is divided by.
	Sent      uint64 `json:"sent"`
	Delivered uint64 `json:"delivered"`
	Relayed   uint64 `json:"relayed"`
	// Elapsed is the sending phase.
	Elapsed time.Duration `json:"elapsed_ns"`
	// SentPPS and DeliveredPPS are per second of Elapsed, packets/s.
	SentPPS      float64 `json:"sent_pps"`
	DeliveredPPS float64 `json:"delivered_pps"`
	// LossPct is 100·(Sent-Delivered)/Sent, %.
	LossPct float64 `json:"loss_pct"`
	// ServerCPU is the server's user+system CPU time over the window from
	// the first packet sent to the end of draining; CPUPerPacketUS is it
	// divided by Relayed, µs. HasCPU is false when the PID is unknown.
	ServerCPU      time.Duration `json:"server_cpu_ns"`
	CPUPerPacketUS float64       `json:"cpu_us_per_pkt"`
	HasCPU         bool          `json:"has_cpu"`
	Err            string        `json:"error,omitempty"`
}

// Peers are the far ends every target relays to: a sink and an echo.
type Peers struct {
	Sink, Echo *peer.Peer
}

// drainWait is how long counters must stay still after sending before a
// step is closed, and drainMax the most a step waits for them.
const (
	drainWait = 150 * time.Millisecond
	drainMax  = 2 * time.Second
)

// MeasureThroughput runs one step against one target.
func MeasureThroughput(ctx context.Context, t Target, st ThroughputStep, peers Peers) ThroughputResult {
	res := ThroughputResult{Target: t.Name, ThroughputStep: st}
	p := peers.Sink
	if st.Echo {
		p = peers.Echo
	}
	ss, err := openSessions(t, st.Clients, p.Addr(), st.Mode, st.Size)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer closeSessions(ss)
	var rx receivers
	if st.Echo {
		rx.start(ss, 0, time.Now())
		defer rx.stop(ss)
	}
	peer0, rx0 := p.Packets(), rx.packets.Load()
	cpu := startCPU(t.PID)
	limit := uint64(st.MaxPackets)
	if limit == 0 {
		limit = uint64(float64(st.Rate) * st.Duration.Seconds())
	}
	res.Sent, res.Elapsed = sendPaced(ctx, ss, float64(st.Rate), st.Duration, limit, st.Senders)
	settle(func() uint64 { return p.Packets() + rx.packets.Load() })
	res.ServerCPU, res.HasCPU = cpu.stop()

	atPeer := p.Packets() - peer0
	res.Relayed = atPeer
	res.Delivered = atPeer
	if st.Echo {
		back := rx.packets.Load() - rx0
		res.Relayed += back
		res.Delivered = back
	}
	if s := res.Elapsed.Seconds(); s > 0 {
		res.SentPPS = float64(res.Sent) / s
		res.DeliveredPPS = float64(res.Delivered) / s
	}
	if res.Sent > 0 {
		res.LossPct = 100 * (float64(res.Sent) - float64(min(res.Delivered, res.Sent))) / float64(res.Sent)
	}
	if res.HasCPU && res.Relayed > 0 {
		res.CPUPerPacketUS = float64(res.ServerCPU.Microseconds()) / float64(res.Relayed)
	}
	return res
}

// settle waits until count stops changing for drainWait (what is still in
// flight has arrived or is lost), at most drainMax.
func settle(count func() uint64) {
	deadline := time.Now().Add(drainMax)
	last, still := count(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(drainWait / 5)
		if c := count(); c != last {
			last, still = c, time.Now()
		} else if time.Since(still) >= drainWait {
			return
		}
	}
}
