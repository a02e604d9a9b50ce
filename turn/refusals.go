package turn

import (
	"context"
	"log/slog"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Refusal is a kind of request the engine refused or dropped for policy,
// counted for metrics (Engine.Refused) and logged in aggregate.
type Refusal uint8

// Refusal kinds.
const (
	// RefusedQuotaUser: Allocate over AllocationsPerUser (486).
	RefusedQuotaUser Refusal = iota
	// RefusedQuotaIP: Allocate over AllocationsPerIP (486).
	RefusedQuotaIP
	// RefusedQuotaTotal: Allocate over MaxAllocations (508).
	RefusedQuotaTotal
	// RefusedRelay: the relay allocator had no port (508).
	RefusedRelay
	// RefusedPermission: CreatePermission to a peer outside the allowlist (403).
	RefusedPermission
	// RefusedChannel: ChannelBind to a peer outside the allowlist (403).
	RefusedChannel
	// RefusedAuth: a request with MESSAGE-INTEGRITY that failed
	// authentication (401 or 438).
	RefusedAuth
	// RefusedThrottled: a request with MESSAGE-INTEGRITY dropped unanswered
	// because its source address, its USERNAME or the engine had used up
	// its authentication failure budget (Settings.AuthFailureBurst).
	RefusedThrottled
	// RefusedStateAllocate, RefusedStatePermission and RefusedStateChannel:
	// an Allocate, CreatePermission or ChannelBind that would have passed
	// Settings.StateBudget (508).
	RefusedStateAllocate
	RefusedStatePermission
	RefusedStateChannel
	numRefusals
)

// NumRefusals is the number of Refusal kinds, for counter arrays.
const NumRefusals = int(numRefusals)

// String names the kind for metrics labels.
func (r Refusal) String() string {
	switch r {
	case RefusedQuotaUser:
		return "quota_user"
	case RefusedQuotaIP:
		return "quota_ip"
	case RefusedQuotaTotal:
		return "quota_total"
	case RefusedRelay:
		return "relay_capacity"
	case RefusedPermission:
		return "forbidden_permission"
	case RefusedChannel:
		return "forbidden_channel"
	case RefusedAuth:
		return "auth_failure"
	case RefusedThrottled:
		return "auth_throttled"
	case RefusedStateAllocate:
		return "state_budget_allocate"
	case RefusedStatePermission:
		return "state_budget_permission"
	case RefusedStateChannel:
		return "state_budget_channel"
	}
	return "unknown"
}

// describe is the kind in words for the aggregated log line.
func (r Refusal) describe() string {
	switch r {
	case RefusedQuotaUser:
		return "Allocate over the per-user quota (486)"
	case RefusedQuotaIP:
		return "Allocate over the per-IP quota (486)"
	case RefusedQuotaTotal:
		return "Allocate over the total quota (508)"
	case RefusedRelay:
		return "Allocate with no relay port free (508)"
	case RefusedPermission:
		return "CreatePermission to a forbidden peer (403)"
	case RefusedChannel:
		return "ChannelBind to a forbidden peer (403)"
	case RefusedAuth:
		return "request failing authentication (401/438)"
	case RefusedThrottled:
		return "request over an authentication failure budget of its address, username or the engine (dropped)"
	case RefusedStateAllocate:
		return "Allocate over the state memory budget (508)"
	case RefusedStatePermission:
		return "CreatePermission over the state memory budget (508)"
	case RefusedStateChannel:
		return "ChannelBind over the state memory budget (508)"
	}
	return "unknown"
}

// capacity reports whether the kind means the server, not one client, has
// run out: those aggregate at WARN, the others at INFO.
func (r Refusal) capacity() bool {
	switch r {
	case RefusedQuotaTotal, RefusedRelay, RefusedStateAllocate, RefusedStatePermission, RefusedStateChannel:
		return true
	}
	return false
}

func (q quotaResult) refusal() Refusal {
	switch q {
	case quotaUser:
		return RefusedQuotaUser
	case quotaIP:
		return RefusedQuotaIP
	}
	return RefusedQuotaTotal
}

// RefusalLogInterval is how often the engine writes one aggregated line per
// kind of refusal seen since the last (Sweep writes them). Each refusal
// itself is logged only at DEBUG, so a flood of refused requests costs a
// bounded number of log lines.
const RefusalLogInterval = 10 * time.Second

// clientSketchBits is the size of the bitmap that estimates how many
// distinct client addresses a kind of refusal came from in an interval
// (linear counting): fixed memory whatever the number of sources, accurate
// to a few percent up to about this many addresses.
const clientSketchBits = 4096

// refusalLog counts refusals for metrics and aggregates them for the log.
// Recording one is a few atomic adds: no lock, no allocation, so a flood
// of refused requests does not contend on it.
type refusalLog struct {
	total   [numRefusals]atomic.Uint64 // since start, for metrics
	window  [numRefusals]atomic.Uint64 // since the last aggregated line
	clients [numRefusals][clientSketchBits / 64]atomic.Uint64

	mu   sync.Mutex // serializes flush
	last int64      // unix ns of the last flush
}

// refused counts a refusal of kind r of a request from ft.
func (e *Engine) refused(r Refusal, ft FiveTuple) {
	l := &e.refusals
	l.total[r].Add(1)
	l.window[r].Add(1)
	b := keyOfAddr(quotaAddr(ft.Client.Addr()), 0).hash() >> 52 // the top 12 bits: clientSketchBits
	l.clients[r][b/64].Or(1 << (b % 64))
}

// Refused returns how many requests of kind r the engine has refused since
// it started.
func (e *Engine) Refused(r Refusal) uint64 {
	if r >= numRefusals {
		return 0
	}
	return e.refusals.total[r].Load()
}

// flushRefusals writes one line per kind refused since the last flush, if
// RefusalLogInterval has passed since then.
func (e *Engine) flushRefusals(now int64) {
	l := &e.refusals
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == 0 {
		l.last = now
	}
	if now-l.last < int64(RefusalLogInterval) {
		return
	}
	interval := time.Duration(now - l.last).Round(time.Second)
	l.last = now
	for r := range numRefusals {
		n := l.window[r].Swap(0)
		if n == 0 {
			continue
		}
		zero := 0
		for i := range l.clients[r] {
			zero += 64 - bits.OnesCount64(l.clients[r][i].Swap(0))
		}
		level := slog.LevelInfo
		if r.capacity() {
			level = slog.LevelWarn
		}
		if e.logs(level) {
			e.log.Log(context.Background(), level, "requests refused", "what", r.describe(), "count", n,
				"clients", distinct(zero, n), "interval", interval.String())
		}
	}
}

// distinct estimates from a linear-counting bitmap with zero bits still
// clear how many distinct addresses set it, at most n (the events).
func distinct(zero int, n uint64) uint64 {
	m := float64(clientSketchBits)
	est := m * math.Log(m/float64(max(zero, 1)))
	return min(uint64(math.Round(est)), n)
}
