package bench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/stats"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/bench/udpbatch"
)

// AllocsStep is one allocation-rate measurement.
type AllocsStep struct {
	// Workers run cycles concurrently, each cycle on a fresh socket (a new
	// client): Allocate → 401 → authenticated Allocate → Refresh(0).
	Workers int `json:"workers"`
	// Duration and MaxOps bound the step (cycles started).
	Duration time.Duration `json:"duration_ns"`
	MaxOps   int           `json:"max_ops"`
}

func (s AllocsStep) String() string { return fmt.Sprintf("workers=%d", s.Workers) }

// AllocsResult is one target's allocation rate.
type AllocsResult struct {
	Target string `json:"target"`
	AllocsStep
	Repeat  int           `json:"repeat"`
	Done    int           `json:"done"`
	Failed  int           `json:"failed"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// PerSec is completed cycles (allocations made and released) per second.
	PerSec float64 `json:"allocs_per_sec"`
	// CycleP50US and CycleP99US are the duration of one cycle, µs.
	CycleP50US float64 `json:"cycle_p50_us"`
	CycleP99US float64 `json:"cycle_p99_us"`
	// CPUPerAllocUS is server CPU per completed cycle, µs.
	CPUPerAllocUS float64 `json:"cpu_us_per_alloc"`
	HasCPU        bool    `json:"has_cpu"`
	Err           string  `json:"error,omitempty"` // the first failure
}

// MeasureAllocs runs one allocation-rate step against a TURN target.
func MeasureAllocs(ctx context.Context, t Target, st AllocsStep) AllocsResult {
	res := AllocsResult{Target: t.Name, AllocsStep: st}
	var (
		started atomic.Int64
		mu      sync.Mutex
		cycles  []int64
		wg      sync.WaitGroup
	)
	cpu := startCPU(t.PID)
	start := time.Now()
	deadline := start.Add(st.Duration)
	for w := 0; w < max(st.Workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			var failed int
			var firstErr error
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if st.MaxOps > 0 && started.Add(1) > int64(st.MaxOps) {
					break
				}
				t0 := time.Now()
				if err := allocCycle(t, nextAllocClient()); err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				mine = append(mine, time.Since(t0).Nanoseconds())
			}
			mu.Lock()
			cycles = append(cycles, mine...)
			res.Failed += failed
			if firstErr != nil && res.Err == "" {
				res.Err = firstErr.Error()
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	cpuUsed, ok := cpu.stop()
	res.Done = len(cycles)
	res.PerSec = float64(res.Done) / res.Elapsed.Seconds()
	slices.Sort(cycles)
	res.CycleP50US = float64(stats.Percentile(cycles, 50)) / 1e3
	res.CycleP99US = float64(stats.Percentile(cycles, 99)) / 1e3
	if ok && res.Done > 0 {
		res.HasCPU = true
		res.CPUPerAllocUS = float64(cpuUsed.Microseconds()) / float64(res.Done)
	}
	return res
}

// allocClients numbers the clients of allocation cycles process-wide.
var allocClients atomic.Uint64

// nextAllocClient is a client address not used by any recent cycle. The
// kernel's ephemeral ports would come back within seconds at thousands of
// cycles per second, and a server may still hold the released allocation of
// that 5-tuple for a moment (coturn answers 437 then); a new client is a new
// 5-tuple. Addresses are 127.0.1.1-250, ports 20000-59999: 10M clients
// before one repeats.
func nextAllocClient() netip.AddrPort {
	i := allocClients.Add(1) - 1
	const perIP = 40000
	ip := byte(1 + (i/perIP)%250)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 1, ip}), uint16(20000+i%perIP))
}

// allocCycle is one new client's allocation and its release.
func allocCycle(t Target, local netip.AddrPort) error {
	uc, err := udpbatch.Listen(local, udpbatch.Options{})
	if err != nil {
		return err
	}
	defer uc.Close()
	c := turnclient.New(uc, t.Addr, t.Creds)
	if _, err := c.Allocate(0); err != nil {
		return err
	}
	return c.Refresh(0)
}
