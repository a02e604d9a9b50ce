package soak

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tern-gw/tern/bench/procstat"
)

// Sample is the state at one point of the run.
type Sample struct {
	// At is the time since the start.
	At time.Duration `json:"at_ns"`
	// RSS and Anon are the server's resident and anonymous memory, bytes; CPU its CPU time
	// since the previous sample as a share of one core.
	RSS  int64   `json:"rss_bytes"`
	Anon int64   `json:"anon_bytes"`
	CPU  float64 `json:"cpu"`
	// LegitAllocated, LegitSent and LegitReceived are the legitimate clients' totals so far.
	LegitAllocated int    `json:"legit_allocated"`
	LegitSent      uint64 `json:"legit_sent"`
	LegitReceived  uint64 `json:"legit_received"`
	// QuotaHeld and QuotaRefused are the quota attacker's allocations and refusals so far.
	QuotaHeld    int `json:"quota_held"`
	QuotaRefused int `json:"quota_refused"`
	// FloodSent and FloodAnswered are the wrong-password requests and their answers so far.
	FloodSent     uint64 `json:"flood_sent"`
	FloodAnswered uint64 `json:"flood_answered"`
	// ConnsHeld is the idle TCP connections open on the attacker's side.
	ConnsHeld int `json:"conns_held"`
	// PeerReceived is the datagrams the echo peer has received (when Config.PeerPackets is
	// set); ServerUDPDrops and SelfUDPDrops the datagrams the kernel dropped, for full
	// receive buffers, on the server's sockets and on this process's (clients and peer).
	PeerReceived   uint64 `json:"peer_received"`
	ServerUDPDrops uint64 `json:"server_udp_drops"`
	SelfUDPDrops   uint64 `json:"self_udp_drops"`
	// FDs is the server's open file descriptors.
	FDs int `json:"fds"`
	// Server holds the server's metrics that say what it refused and holds (see keepMetric).
	Server map[string]float64 `json:"server,omitempty"`
}

type sampler struct {
	// mu serializes sample: the ticker and the attack sequence both take samples.
	mu          sync.Mutex
	cfg         Config
	start       time.Time
	legit       *legit
	quota       *quotaAttacker
	flood       *flooder
	conns       *connHolder
	samples     []Sample
	lastCPU     time.Duration
	lastAt      time.Duration
	lastMetrics map[string]float64
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample takes a sample and returns its index in s.samples.
func (s *sampler) sample() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sm := Sample{At: time.Since(s.start)}
	if s.cfg.PID > 0 {
		if m, err := procstat.ReadMemory(s.cfg.PID); err == nil {
			sm.RSS, sm.Anon = m.RSS, m.Anon
		}
		if cpu, err := procstat.CPU(s.cfg.PID); err == nil {
			if s.lastAt > 0 && sm.At > s.lastAt {
				sm.CPU = float64(cpu-s.lastCPU) / float64(sm.At-s.lastAt)
			}
			s.lastCPU = cpu
		}
	}
	s.lastAt = sm.At
	if s.cfg.PID > 0 {
		sm.ServerUDPDrops, _ = procstat.UDPDrops(s.cfg.PID)
		sm.FDs, _ = procstat.FDs(s.cfg.PID)
	}
	sm.SelfUDPDrops, _ = procstat.UDPDrops(os.Getpid())
	if s.cfg.PeerPackets != nil {
		sm.PeerReceived = s.cfg.PeerPackets()
	}
	sm.LegitAllocated = int(s.legit.allocated.Load())
	for _, c := range s.legit.clients {
		sm.LegitSent += c.sent.Load()
		sm.LegitReceived += c.received.Load()
	}
	sm.QuotaHeld, sm.QuotaRefused = s.quota.progress()
	sm.FloodSent, sm.FloodAnswered = s.flood.progress()
	sm.ConnsHeld = s.conns.observe()
	if s.cfg.MetricsURL != "" {
		if m, err := scrape(s.cfg.MetricsURL); err == nil {
			sm.Server = m
			s.lastMetrics = m
		}
	}
	s.samples = append(s.samples, sm)
	if s.cfg.Progress != nil {
		fmt.Fprintln(s.cfg.Progress, sm.line(s.prev()))
	}
	return len(s.samples) - 1
}

// peaks sets r's base figures from sample first and its peaks from samples first to last.
func (s *sampler) peaks(first, last int, r *AttackResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.BaseRSS, r.BaseGoroutines = s.samples[first].RSS, s.samples[first].Server["go_goroutines"]
	for _, sm := range s.samples[first : last+1] {
		r.PeakRSS = max(r.PeakRSS, sm.RSS)
		r.PeakGoroutines = max(r.PeakGoroutines, sm.Server["go_goroutines"])
		r.PeakFDs = max(r.PeakFDs, sm.FDs)
	}
}

// prev returns the sample before the last one (zero for the first).
func (s *sampler) prev() Sample {
	if len(s.samples) < 2 {
		return Sample{}
	}
	return s.samples[len(s.samples)-2]
}

// line is a progress line: the state now and the legitimate loss since prev.
func (sm Sample) line(prev Sample) string {
	sent, rcv := sm.LegitSent-prev.LegitSent, sm.LegitReceived-prev.LegitReceived
	loss := 0.0
	if sent > 0 {
		loss = 100 * (1 - float64(min(rcv, sent))/float64(sent))
	}
	return fmt.Sprintf("%4.0fs rss %6.1f MB cpu %3.0f%% | legit %d alloc, %d sent, loss %.2f%% | quota held %d refused %d | flood %d sent %d answered | tcp held %d (server %v)",
		sm.At.Seconds(), float64(sm.RSS)/1e6, 100*sm.CPU, sm.LegitAllocated, sent, loss,
		sm.QuotaHeld, sm.QuotaRefused, sm.FloodSent, sm.FloodAnswered, sm.ConnsHeld,
		sm.Server[`tern_listener_connections{name="tcp"}`])
}

// keepMetric selects the series a sample keeps: allocations, connections, refusals and
// drops by reason, and packets relayed (to tell where datagrams were lost).
func keepMetric(name string) bool {
	switch name {
	case "stunner_allocations_active", "tern_listener_connections", "tern_listener_connections_refused_total",
		"tern_listener_connections_closed_total", "tern_refused_requests_total", "tern_dropped_packets_total",
		"tern_peer_packets_total", "stunner_listener_packets_total", "go_goroutines":
		return true
	}
	return false
}

// scrape reads the server's metrics, keeping the series keepMetric selects, each named as
// Prometheus prints it: name{label="value",...}.
func scrape(url string) (map[string]float64, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !keepMetric(name) {
			continue
		}
		for _, m := range f.GetMetric() {
			out[seriesName(name, m)] = metricValue(m)
		}
	}
	return out, nil
}

func seriesName(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name + "{")
	for i, l := range m.GetLabel() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", l.GetName(), l.GetValue())
	}
	b.WriteByte('}')
	return b.String()
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
