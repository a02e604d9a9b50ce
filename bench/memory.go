package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/procstat"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/bench/udpbatch"
)

// MemoryStep is one memory-per-allocation measurement.
type MemoryStep struct {
	// Allocations is K, the allocations to hold.
	Allocations int `json:"allocations"`
	// Workers make allocations concurrently.
	Workers int `json:"workers"`
	// Timeout bounds making them; what is held by then is measured.
	Timeout time.Duration `json:"timeout_ns"`
}

func (s MemoryStep) String() string { return fmt.Sprintf("K=%d", s.Allocations) }

// MemoryResult is one target's resident memory while holding allocations.
type MemoryResult struct {
	Target string `json:"target"`
	MemoryStep
	Repeat int `json:"repeat"`
	// Held is the allocations actually made (at most Allocations).
	Held int `json:"held"`
	// RSS0 and RSSK are VmRSS before allocating and while holding, bytes.
	RSS0 int64 `json:"rss0_bytes"`
	RSSK int64 `json:"rssk_bytes"`
	// PerAllocBytes is (RSSK-RSS0)/Held, bytes.
	PerAllocBytes float64       `json:"per_alloc_bytes"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	// Err is the first failure, e.g. the server's 508 or a file-descriptor
	// limit, when fewer than Allocations were held.
	Err string `json:"error,omitempty"`
}

// IdleResult is a target's resident memory before it has served anything but
// the launcher's readiness probe: what the process costs with no allocations.
type IdleResult struct {
	Target string `json:"target"`
	// RSS is VmRSS, split into Anon (heap, stacks, written data) and File
	// (mapped file pages: for a Go server mostly its binary's code and
	// tables, clean page cache shared with every other mapping of the file),
	// bytes.
	RSS  int64 `json:"rss_bytes"`
	Anon int64 `json:"rss_anon_bytes"`
	File int64 `json:"rss_file_bytes"`
	// Threads is the number of threads of the process.
	Threads int    `json:"threads"`
	Err     string `json:"error,omitempty"`
}

// MeasureIdle reads the resident memory of each TURN target. Call it right
// after the targets are launched, before any other measurement.
func MeasureIdle(ts []Target) []IdleResult {
	var out []IdleResult
	for _, t := range turnOnly(ts) {
		res := IdleResult{Target: t.Name}
		if t.PID <= 0 {
			res.Err = "no server PID: RSS cannot be read"
		} else if m, err := procstat.ReadMemory(t.PID); err != nil {
			res.Err = err.Error()
		} else {
			res.RSS, res.Anon, res.File = m.RSS, m.Anon, m.File
			if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", t.PID)); err == nil {
				res.Threads = len(tasks)
			}
		}
		out = append(out, res)
	}
	return out
}

// memoryClients numbers the clients of memory steps process-wide, so that
// no step reuses a 5-tuple whose allocation a server may still hold.
var memoryClients atomic.Int64

// memoryClient is the address of client i (of memoryClients). Clients come
// from 127.0.2.1 upwards, 40000 ports each, so that K can exceed one
// address's ephemeral ports; each socket is closed once its allocation is
// made (UDP has no connection to keep, and the harness would otherwise need
// K file descriptors), and bound again to release it.
func memoryClient(i int64) netip.AddrPort {
	const perIP = 40000
	n := i / perIP
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(2 + n/250), byte(1 + n%250)}), uint16(20000+i%perIP))
}

// maxConsecutiveFailures ends allocating early: the server is full.
const maxConsecutiveFailures = 64

// MeasureMemory makes st.Allocations allocations on a TURN target, reads
// its RSS, and releases them.
func MeasureMemory(ctx context.Context, t Target, st MemoryStep) MemoryResult {
	res := MemoryResult{Target: t.Name, MemoryStep: st}
	if t.PID <= 0 {
		res.Err = "no server PID: RSS cannot be read"
		return res
	}
	var err error
	if res.RSS0, err = procstat.RSS(t.PID); err != nil {
		res.Err = err.Error()
		return res
	}
	type auth struct{ realm, nonce string }
	held := make([]*auth, st.Allocations)
	var (
		next, consecutive atomic.Int64
		errMu             sync.Mutex
		firstErr          error
		wg                sync.WaitGroup
	)
	base := memoryClients.Add(int64(st.Allocations)) - int64(st.Allocations)
	start := time.Now()
	deadline := start.Add(st.Timeout)
	for w := 0; w < max(st.Workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) && consecutive.Load() < maxConsecutiveFailures {
				i := int(next.Add(1) - 1)
				if i >= len(held) {
					return
				}
				realm, nonce, err := holdAllocation(t, memoryClient(base+int64(i)))
				if err != nil {
					consecutive.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					continue
				}
				consecutive.Store(0)
				held[i] = &auth{realm, nonce}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	for _, h := range held {
		if h != nil {
			res.Held++
		}
	}
	if res.Held < st.Allocations {
		res.Err = "timed out"
		if firstErr != nil {
			res.Err = firstErr.Error()
		}
	}
	// Let the server finish what the last replies started before reading.
	time.Sleep(500 * time.Millisecond)
	if res.RSSK, err = procstat.RSS(t.PID); err != nil && res.Err == "" {
		res.Err = err.Error()
	}
	if res.Held > 0 {
		res.PerAllocBytes = float64(res.RSSK-res.RSS0) / float64(res.Held)
	}

	// Release, so that the next target and step start from nothing.
	var rel atomic.Int64
	for w := 0; w < max(st.Workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(rel.Add(1) - 1)
				if i >= len(held) {
					return
				}
				if h := held[i]; h != nil {
					releaseAllocation(t, memoryClient(base+int64(i)), h.realm, h.nonce)
				}
			}
		}()
	}
	wg.Wait()
	return res
}

func holdAllocation(t Target, local netip.AddrPort) (realm, nonce string, err error) {
	uc, err := udpbatch.Listen(local, udpbatch.Options{})
	if err != nil {
		return "", "", err
	}
	defer uc.Close()
	c := turnclient.New(uc, t.Addr, t.Creds)
	if _, err := c.Allocate(0); err != nil {
		return "", "", err
	}
	return c.Realm(), c.Nonce(), nil
}

func releaseAllocation(t Target, local netip.AddrPort, realm, nonce string) {
	uc, err := udpbatch.Listen(local, udpbatch.Options{})
	if err != nil {
		return // left to expire on the server
	}
	defer uc.Close()
	c := turnclient.New(uc, t.Addr, t.Creds)
	c.Retries = 2
	c.SetAuth(realm, nonce)
	_ = c.Refresh(0)
}
