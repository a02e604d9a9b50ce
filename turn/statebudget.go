package turn

import "sync/atomic"

// What the engine's state costs in memory, and the budget that caps it.
//
// A client with credentials can make state the server keeps: allocations
// (capped per user, per client address and in total), up to MaxPermissions
// permissions and MaxChannels channel bindings in each. The caps per
// allocation multiply by the allocations, so without a cap on the sum a few
// client addresses make ternd's memory pass its container's limit (issue
// 22: 409,600 channels took 54-60 MB). Settings.StateBudget caps that sum
// in bytes: each allocation, permission and channel binding is charged
// what it costs when it is made and given back when it goes, and a request
// that would pass the budget gets 508 Insufficient Capacity (RFC 8656 §7.2
// for Allocate; §9.2 and §11.2 answer 508 when the server cannot install
// a permission or channel) and installs nothing.
//
// The costs are the Go heap bytes measured by TestStateCosts (runtime
// MemStats over thousands of objects), rounded up, so that the budget
// bounds the live heap the state holds.
const (
	// AllocationCost is the bytes charged for an allocation, besides its
	// relay sockets (Config.RelayCost each): the Allocation and its table
	// entry (measured: 466) and the first slot arrays of its permission
	// and channel indexes (96 each), made at its first CreatePermission
	// or ChannelBind.
	AllocationCost = 768
	// PermissionCost is the bytes charged for a permission: its entry (64)
	// and its slots in the allocation's peer index, which is kept between
	// a quarter and half full (16-32 bytes). Measured: 83.
	PermissionCost = 96
	// ChannelCost is the bytes charged for a channel binding: its entry
	// and its index slots. The number table's pages are charged as they
	// are made (chanPageCost, chanDirCost, chanHighCost). Measured: 133,
	// and 141 with the page share of consecutive numbers.
	ChannelCost = 160
)

// The channel number table's parts (see chanNumbers), charged when a
// ChannelBind makes them and given back with the allocation: a page of 64
// slots, the directory of 0x4000-0x4FFF made at the first ChannelBind, and
// the directory of 0x5000-0x7FFF made at the first number there. Go's
// size classes round chanNumbers (520 bytes) to 576.
const (
	chanPageCost = 512
	chanDirCost  = 576
	chanHighCost = 1536
)

// stateBudget counts the bytes of state charged against
// Settings.StateBudget. take and give are an atomic add each: creation
// requests are not the per-packet path, and no lock is shared between
// allocations.
type stateBudget struct {
	limit atomic.Int64 // bytes; 0 is no budget
	used  atomic.Int64 // bytes charged
}

// take charges n bytes and reports true, or charges nothing and reports
// false when the budget would be passed. Two requests racing at the edge
// may both be refused; neither passes the budget.
func (b *stateBudget) take(n int64) bool {
	if n <= 0 {
		return true
	}
	used := b.used.Add(n)
	if l := b.limit.Load(); l > 0 && used > l {
		b.used.Add(-n)
		return false
	}
	return true
}

// give returns n bytes charged by take.
func (b *stateBudget) give(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// charge takes n bytes from the budget for state of a, and reports whether
// it may install it. A deleted allocation's state is garbage already and
// is not charged. The caller holds a.mu.
func (a *Allocation) charge(n int64) bool {
	if a.deleted.Load() || a.state == nil {
		return true
	}
	if !a.state.take(n) {
		return false
	}
	a.charged += n
	return true
}

// refund gives back n bytes of a's state (at most what a holds). The
// caller holds a.mu.
func (a *Allocation) refund(n int64) {
	n = min(n, a.charged)
	if n <= 0 || a.state == nil {
		return
	}
	a.charged -= n
	a.state.give(n)
}

// StateBytes returns the bytes of state (allocations, permissions, channel
// bindings) charged against Settings.StateBudget, whether or not a budget
// is set.
func (e *Engine) StateBytes() int64 { return e.state.used.Load() }

// StateBudget returns Settings.StateBudget as now in force, bytes; 0 is
// no budget.
func (e *Engine) StateBudget() int64 { return e.state.limit.Load() }
