package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/procstat"
	"github.com/tern-gw/tern/bench/stats"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/bench/udpbatch"
)

// Direction is which way the flows tests send media.
type Direction string

const (
	// C2P: every client sends to the peer through its allocation; counted
	// at the peer (a sink).
	C2P Direction = "c2p"
	// P2C: the peer sends to every flow's relayed address; counted at the
	// clients. This is most of an SFU's traffic (downstream).
	P2C Direction = "p2c"
	// Both: every client sends, the peer echoes each datagram back to its
	// relayed address, so every flow carries the same packets both ways at
	// once and each packet's round trip is timed (p50/p99).
	Both Direction = "both"
)

// Pacing is how the generator spreads packets over flows and time.
type Pacing string

const (
	// Interleaved: one datagram at a time, flows in round-robin order on
	// a fixed schedule (rate·t packets due at time t), every datagram its
	// own send call — what hundreds of WebRTC flows look like to a server.
	Interleaved Pacing = "interleaved"
	// Burst: 32 datagrams of one flow per sendmmsg (one write of 32
	// frames on a stream), then the next flow: the old throughput view.
	Burst Pacing = "burst"
)

// burstLen is datagrams per flow per send call in Burst pacing.
const burstLen = 32

// ParseDirection and ParsePacing check a flag value.
func ParseDirection(s string) (Direction, error) {
	switch d := Direction(s); d {
	case C2P, P2C, Both:
		return d, nil
	}
	return "", fmt.Errorf("direction %q: want c2p, p2c or both", s)
}

// ParsePacing checks a -pacing value.
func ParsePacing(s string) (Pacing, error) {
	switch p := Pacing(s); p {
	case Interleaved, Burst:
		return p, nil
	}
	return "", fmt.Errorf("pacing %q: want interleaved or burst", s)
}

// FlowsStep is one load point of the flows test.
type FlowsStep struct {
	// Flows is the number of allocations, each its own client transport.
	Flows int `json:"flows"`
	// Rate is the packets/s the generator offers in all: the clients'
	// (c2p, both) or the peer's (p2c).
	Rate      int              `json:"rate_pps"`
	Size      int              `json:"size_bytes"`
	Direction Direction        `json:"direction"`
	Pacing    Pacing           `json:"pacing"`
	Transport turnclient.Proto `json:"transport"`
	Duration  time.Duration    `json:"duration_ns"`
	// MaxPackets bounds the packets offered (0: Rate × Duration).
	MaxPackets int `json:"max_packets"`
	// GSO makes the clients' UDP bursts (Burst pacing) one UDP_SEGMENT
	// send each (udpbatch.WriteGSO): burstLen equal datagrams per system
	// call, cut apart by the kernel. It lowers the generator's cost per
	// packet; the servers receive the same datagrams.
	GSO bool `json:"gso,omitempty"`
}

func (s FlowsStep) String() string {
	g := ""
	if s.GSO {
		g = " gso"
	}
	return fmt.Sprintf("%s %s %s%s N=%d %dB %dpps", s.Direction, s.Transport, s.Pacing, g, s.Flows, s.Size, s.Rate)
}

// CheckGSO tells whether s can send with GSO: Burst pacing, a client
// direction (c2p or both), and a burst of ChannelData messages of s.Size
// bytes that fits one UDP GSO send; nil when s.GSO is off.
func (s FlowsStep) CheckGSO() error {
	if !s.GSO {
		return nil
	}
	switch {
	case s.Pacing != Burst:
		return fmt.Errorf("gso: %s pacing sends one datagram per call; GSO needs burst pacing", s.Pacing)
	case s.Direction == P2C:
		return fmt.Errorf("gso: the clients send with GSO, and in p2c the peer sends")
	case (s.Size+4)*burstLen > udpbatch.GSOMaxBytes:
		return fmt.Errorf("gso: %d datagrams of %d bytes exceed one GSO send (%d bytes)", burstLen, s.Size+4, udpbatch.GSOMaxBytes)
	case !udpbatch.GSOSupported():
		return fmt.Errorf("gso: the kernel has no UDP_SEGMENT (Linux 4.18+)")
	}
	return nil
}

// FlowsResult is one target measured at one flows step.
type FlowsResult struct {
	Target string `json:"target"`
	FlowsStep
	Repeat int `json:"repeat"`
	// Sent is what the generator sent (clients and peer); Delivered what
	// reached its final receiver; Relayed the packets the server forwarded
	// (in both directions), which both CPU figures are divided by.
	Sent      uint64        `json:"sent"`
	Delivered uint64        `json:"delivered"`
	Relayed   uint64        `json:"relayed"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	// DeliveredPPS is Delivered per second of Elapsed.
	DeliveredPPS float64 `json:"delivered_pps"`
	// LossPct is 100·(Sent-Delivered)/Sent.
	LossPct float64 `json:"loss_pct"`
	// ServerCPU is the server's user+system time over the window (first
	// packet to drained), CPUPerPacketUS it per relayed packet, µs.
	ServerCPU      time.Duration `json:"server_cpu_ns"`
	CPUPerPacketUS float64       `json:"cpu_us_per_pkt"`
	HasCPU         bool          `json:"has_cpu"`
	// MachineCPU is all CPUs' busy time (/proc/stat) over the same window;
	// MachineUSPerPkt it per relayed packet. BaselineUSPerPkt is the same
	// figure of the "direct" target of the same step and repeat (the
	// generator and peer alone, no server), and NetMachineUSPerPkt the
	// difference: the server's whole cost to the machine, softirq included.
	MachineCPU         time.Duration `json:"machine_cpu_ns"`
	MachineUSPerPkt    float64       `json:"machine_us_per_pkt"`
	BaselineUSPerPkt   float64       `json:"baseline_us_per_pkt,omitempty"`
	NetMachineUSPerPkt float64       `json:"net_machine_us_per_pkt,omitempty"`
	HasBaseline        bool          `json:"has_baseline,omitempty"`
	// MachineBusyPct is MachineCPU over all CPUs' time in the window, %:
	// near 100 the machine was saturated (the generator, other tenants),
	// and the whole-machine figures measure its capacity, not the server.
	MachineBusyPct float64 `json:"machine_busy_pct"`
	// HasMachine is false when /proc/stat could not be read. Its 10 ms
	// ticks can read 0 over a short window.
	HasMachine bool `json:"has_machine"`
	// GeneratorUSPerPkt is the harness's own CPU time (this process: the
	// clients and the peer) over the window per relayed packet, µs: the
	// part of MachineUSPerPkt that is the load, not the server.
	GeneratorUSPerPkt float64 `json:"generator_us_per_pkt"`
	// RTT percentiles (both, webrtc), µs, over RTTSamples round trips.
	RTTSamples int     `json:"rtt_samples,omitempty"`
	RTTP50US   float64 `json:"rtt_p50_us,omitempty"`
	RTTP99US   float64 `json:"rtt_p99_us,omitempty"`
	// Topology is where it ran (Net.Topology: "", loopback, veth).
	Topology string `json:"topology,omitempty"`
	// ServerCPUs is the CPU list the servers were pinned to (Net.ServerCPUs).
	ServerCPUs string `json:"server_cpus,omitempty"`
	// KernelRelayed is how many of Relayed the kernel relayed without a
	// socket (KernelCounters of the target, read before and after; issue 15).
	KernelRelayed uint64 `json:"kernel_relayed,omitempty"`
	HasKernel     bool   `json:"has_kernel,omitempty"`
	// ListenerRx is the datagrams the target's listeners received from
	// clients over the window (ListenerCounters of the target).
	ListenerRx  uint64 `json:"listener_rx,omitempty"`
	HasListener bool   `json:"has_listener,omitempty"`
	// SetupResends is how many TURN requests the clients sent again while
	// they set their allocations up (turnclient.Client.Resends). A late
	// copy can reach the listener inside the window, so ListenerRx may
	// exceed the datagrams sent by at most this many.
	SetupResends uint64 `json:"setup_resends,omitempty"`
	Err          string `json:"error,omitempty"`
}

// flowPlan is what one measurement sends: the slots the clients' (or the
// peer's) schedule walks in order, each a flow and a payload size, at rate
// slots per second; and how many copies the peer sends back per datagram.
type flowPlan struct {
	flows    int
	slots    []slot
	rate     float64
	limit    uint64
	dur      time.Duration
	pacing   Pacing
	proto    turnclient.Proto
	upstream bool // clients send on the schedule
	peerSend bool // the peer sends on the schedule (to relayed addresses)
	copies   int  // peer: 0 sink, 1 echo, 3 webrtc (echo + 2)
	rtt      bool
	gso      bool // clients send bursts with UDP GSO (FlowsStep.GSO)
}

// slot is one scheduled datagram: flow f sends frame kind k.
type slot struct {
	f int32
	k int8
}

// maxRTTSamples bounds the round-trip times kept per measurement.
const maxRTTSamples = 2_000_000

// measureFlows runs plan against t with sizes[k] the payload of frame kind k.
func measureFlows(ctx context.Context, t Target, pl flowPlan, sizes []int) FlowsResult {
	var res FlowsResult
	res.Target = t.Name
	var peer *flowPeer
	err := inPeerNS(func() (err error) {
		peer, err = startFlowPeer(peerListenAddr(), pl.copies, pl.gso)
		return err
	})
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer peer.close()
	var resends atomic.Uint64
	fs, err := openFlows(t, pl.flows, pl.proto, peer.addr, &resends)
	if err != nil {
		// Setting up is not what is measured, and on a loaded machine a server's
		// TLS handshakes or first Allocates can outlast the client's 3.75 s of
		// waiting: once more, after a pause, before the step counts as failed.
		time.Sleep(time.Second)
		fs, err = openFlows(t, pl.flows, pl.proto, peer.addr, &resends)
	}
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer closeFlows(t, fs, &resends)

	base := time.Now()
	var rx flowReceivers
	if pl.copies > 0 || pl.peerSend {
		rx.start(fs, pl.rtt, base, maxRTTSamples/max(len(fs), 1))
	}
	res.Topology, res.ServerCPUs = Net.Topology, Net.ServerCPUs
	kernel, listener := KernelCounters[t.Name], ListenerCounters[t.Name]
	var k0, l0 uint64
	var kerr, lerr error
	if kernel != nil {
		k0, kerr = kernel()
	}
	if listener != nil {
		l0, lerr = listener()
	}
	cpu := startCPU(t.PID)
	gen := startCPU(os.Getpid())
	m0, merr := procstat.MachineBusy()
	w0 := time.Now()
	if pl.upstream {
		res.Sent, res.Elapsed = sendFromClients(ctx, fs, pl, sizes, base)
	} else {
		res.Sent, res.Elapsed = sendFromPeer(ctx, peer, fs, pl, sizes)
	}
	settle(func() uint64 { return peer.got.Load() + rx.packets.Load() })
	res.ServerCPU, res.HasCPU = cpu.stop()
	genCPU, genOK := gen.stop()
	m1, merr2 := procstat.MachineBusy()
	window := time.Since(w0)
	rx.stop(fs)
	if kernel != nil && kerr == nil {
		if k1, err := kernel(); err == nil && k1 >= k0 {
			res.KernelRelayed, res.HasKernel = k1-k0, true
		}
	}
	if listener != nil && lerr == nil {
		if l1, err := listener(); err == nil && l1 >= l0 {
			res.ListenerRx, res.HasListener = l1-l0, true
		}
	}
	res.SetupResends = resends.Load()

	atPeer, atClients := peer.got.Load(), rx.packets.Load()
	res.Sent += peer.sent.Load()
	res.Delivered = atPeer + atClients
	if pl.copies == 1 {
		// Echo: a packet is delivered when it is back; the peer's count
		// is the halfway mark, in Relayed only.
		res.Delivered = atClients
		res.Sent -= peer.sent.Load()
	}
	res.Relayed = atPeer + atClients
	if s := res.Elapsed.Seconds(); s > 0 {
		res.DeliveredPPS = float64(res.Delivered) / s
	}
	if res.Sent > 0 {
		res.LossPct = 100 * (float64(res.Sent) - float64(min(res.Delivered, res.Sent))) / float64(res.Sent)
	}
	if res.HasCPU && res.Relayed > 0 {
		res.CPUPerPacketUS = float64(res.ServerCPU.Microseconds()) / float64(res.Relayed)
	}
	if merr == nil && merr2 == nil && res.Relayed > 0 {
		res.MachineCPU, res.HasMachine = m1-m0, true
		res.MachineUSPerPkt = float64(res.MachineCPU.Microseconds()) / float64(res.Relayed)
		res.MachineBusyPct = 100 * res.MachineCPU.Seconds() / (float64(runtime.NumCPU()) * window.Seconds())
	}
	if genOK && res.Relayed > 0 {
		res.GeneratorUSPerPkt = float64(genCPU.Microseconds()) / float64(res.Relayed)
	}
	if pl.rtt {
		rtts := rx.rtts()
		res.RTTSamples = len(rtts)
		res.RTTP50US = float64(stats.Percentile(rtts, 50)) / 1e3
		res.RTTP99US = float64(stats.Percentile(rtts, 99)) / 1e3
	}
	return res
}

// stamp writes the sequence number and the send time (ns since base) at
// the start of a payload.
func stamp(p []byte, seq uint64, base time.Time) {
	if len(p) >= stampLen {
		binary.BigEndian.PutUint64(p, seq&^noRTT)
		binary.BigEndian.PutUint64(p[8:], uint64(time.Since(base).Nanoseconds()))
	}
}

// sendFromClients walks the plan's slots, each its flow sending one frame
// (interleaved) or burstLen of them (burst), on the schedule.
func sendFromClients(ctx context.Context, fs []*flowConn, pl flowPlan, sizes []int, base time.Time) (uint64, time.Duration) {
	type out struct {
		frame []byte
		at    int
		burst []byte             // burstLen frames back to back (streams, UDP with GSO)
		msgs  []udpbatch.Message // burstLen times the frame (UDP)
	}
	frames := make([][]out, len(fs))
	for i, f := range fs {
		frames[i] = make([]out, len(sizes))
		for k, sz := range sizes {
			fr, at := f.frame(make([]byte, max(sz, stampLen)))
			o := out{frame: fr, at: at}
			if pl.pacing == Burst {
				switch {
				case f.batch != nil && pl.gso:
					o.burst = slices.Repeat(fr, burstLen)
				case f.batch != nil:
					o.msgs = make([]udpbatch.Message, burstLen)
					for j := range o.msgs {
						o.msgs[j] = udpbatch.Message{Buf: fr, Addr: f.dst}
					}
				case f.tr.Stream():
					o.burst = slices.Repeat(fr, burstLen)
				}
			}
			frames[i][k] = o
		}
	}
	burst := 1
	if pl.pacing == Burst {
		burst = burstLen
	}
	next := 0
	var seq uint64
	return pace(ctx, pl.rate, pl.dur, pl.limit, burst, pl.gso, func(n int) int {
		s := pl.slots[next]
		next = (next + 1) % len(pl.slots)
		f, o := fs[s.f], &frames[s.f][s.k]
		if pl.rtt {
			stamp(o.frame[o.at:], seq, base)
			seq++
			// A stream or GSO burst is its own buffer of copies: stamp each.
			for j := 0; o.burst != nil && j < n; j++ {
				copy(o.burst[j*len(o.frame)+o.at:], o.frame[o.at:o.at+stampLen])
			}
		}
		switch {
		case n == 1:
			_ = f.tr.WriteMsg(o.frame)
		case o.msgs != nil:
			_, _ = f.batch.WriteBatch(o.msgs[:n])
		case o.burst != nil && f.batch != nil:
			// One UDP_SEGMENT send: n datagrams of the frame's size.
			_, _ = f.batch.WriteGSO(o.burst[:n*len(o.frame)], len(o.frame))
		case o.burst != nil:
			_ = f.tr.WriteMsg(o.burst[:n*len(o.frame)])
		default:
			for range n {
				_ = f.tr.WriteMsg(o.frame)
			}
		}
		// A send that failed is a dead transport: its packets show as loss.
		return n
	})
}

// sendFromPeer sends raw payloads from the peer's socket to each slot's
// relayed address on the schedule.
func sendFromPeer(ctx context.Context, p *flowPeer, fs []*flowConn, pl flowPlan, sizes []int) (uint64, time.Duration) {
	payloads := make([][]byte, len(sizes))
	for k, sz := range sizes {
		payloads[k] = make([]byte, sz)
	}
	burst := 1
	if pl.pacing == Burst {
		burst = burstLen
	}
	msgs := make([]udpbatch.Message, burst)
	next := 0
	return pace(ctx, pl.rate, pl.dur, pl.limit, burst, false, func(n int) int {
		s := pl.slots[next]
		next = (next + 1) % len(pl.slots)
		for j := range msgs[:n] {
			msgs[j] = udpbatch.Message{Buf: payloads[s.k], Addr: fs[s.f].relayed}
		}
		_, _ = p.conn.WriteBatch(msgs[:n])
		return n
	})
}

// pace calls send on a fixed schedule — rate·t packets due at time t since
// the start — with n = burst packets per call (fewer at the limit), for at
// most dur and limit packets. It returns the packets sent and the time
// sending took.
//
// A generator whose sends cost about what the servers' receiving does
// catches up after a pause at about the rate the receiving side drains.
// One that sends far faster (GSO: dozens of datagrams per system call,
// smooth set) would instead put a pause's debt into the receiving CPU's
// backlog queue at once — 1,000 packets (net.core.netdev_max_backlog) where
// a veth hands packets over — and lose the excess there, loss of the
// generator's making. With smooth, pace therefore sleeps with a fine
// timer (fineSleeper: a runtime timer's wake-up, a millisecond on an idle
// process, is a millisecond's packets at once) and lets the schedule slip
// instead of catching up more than 8 bursts at once: after a pause the
// offered rate is lower than rate, which the packets sent show.
func pace(ctx context.Context, rate float64, dur time.Duration, limit uint64, burst int, smooth bool, send func(n int) int) (uint64, time.Duration) {
	var sent, slipped uint64
	maxLag := uint64(8 * burst)
	sleep := time.Sleep
	if smooth {
		fs := startFineSleep()
		defer fs.stop()
		sleep = fs.sleep
	}
	start := time.Now()
	for sent < limit {
		el := time.Since(start)
		if el >= dur || ctx.Err() != nil {
			break
		}
		due := uint64(el.Seconds()*rate) + 1 // by the schedule, slips included
		want := due - min(slipped, due)
		if smooth && want > sent+maxLag {
			slipped += want - sent - maxLag
			want = sent + maxLag
		}
		want = min(want, limit)
		if want <= sent {
			sleep(time.Duration(float64(sent+slipped)/rate*float64(time.Second)) - el)
			continue
		}
		for sent < want {
			sent += uint64(send(int(min(uint64(burst), limit-sent))))
		}
	}
	return sent, time.Since(start)
}

// flowReceivers read what reaches the clients: they count it and, with
// rtt, keep the round-trip time of every stamped datagram not marked noRTT.
type flowReceivers struct {
	wg      sync.WaitGroup
	packets atomic.Uint64
	mu      sync.Mutex
	samples [][]int64
}

func (r *flowReceivers) start(fs []*flowConn, rtt bool, base time.Time, maxPer int) {
	for _, f := range fs {
		r.wg.Add(1)
		go r.read(f, rtt, base, maxPer)
	}
}

func (r *flowReceivers) stop(fs []*flowConn) {
	for _, f := range fs {
		f.stopReading()
	}
	r.wg.Wait()
}

func (r *flowReceivers) rtts() []int64 {
	var all []int64
	for _, s := range r.samples {
		all = append(all, s...)
	}
	slices.Sort(all)
	return all
}

func (r *flowReceivers) read(f *flowConn, rtt bool, base time.Time, maxPer int) {
	defer r.wg.Done()
	var mine []int64
	defer func() {
		r.mu.Lock()
		r.samples = append(r.samples, mine)
		r.mu.Unlock()
	}()
	take := func(p []byte) {
		if !rtt || len(mine) >= maxPer {
			return
		}
		if f.turn {
			var ok bool
			if p, ok = turnclient.Payload(p); !ok {
				return
			}
		}
		if len(p) < stampLen || p[0]&0x80 != 0 {
			return
		}
		sentAt := int64(binary.BigEndian.Uint64(p[8:]))
		mine = append(mine, max(1, time.Since(base).Nanoseconds()-sentAt))
	}
	if f.batch != nil {
		in := make([]udpbatch.Message, batchSize)
		for i := range in {
			in[i].Buf = make([]byte, 2048)
		}
		for {
			n, err := f.batch.ReadBatch(in)
			if err != nil {
				return
			}
			r.packets.Add(uint64(n))
			for _, m := range in[:n] {
				take(m.Buf[:m.N])
			}
		}
	}
	buf := make([]byte, 2048)
	for {
		n, err := f.tr.ReadMsg(buf)
		if err != nil {
			return
		}
		r.packets.Add(1)
		take(buf[:n])
	}
}
