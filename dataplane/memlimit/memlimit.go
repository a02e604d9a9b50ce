// Package memlimit reads the memory limit of the container ternd runs in
// (cgroup v2's memory.max, else cgroup v1's memory.limit_in_bytes, in
// bytes) and holds the rule that turns it, ternd's --state-budget-mib and
// the config's limits.stateBudgetMiB into the TURN engine's state budget
// (turn.Settings.StateBudget, bytes; docs/security.md, "State budget").
// It imports nothing from Tern.
package memlimit

import (
	"os"
	"strconv"
	"strings"
)

// DefaultStateBudget is the state budget (turn.Settings.StateBudget) when
// neither limits.stateBudgetMiB, ternd --state-budget-mib nor a container
// memory limit sets one: 256 MiB, half of a Dataplane's default memory
// limit (512 MiB).
const DefaultStateBudget = 256 << 20

// cgroupMemoryFiles are where the memory limit of the cgroup ternd runs in
// is read: cgroup v2's memory.max, then cgroup v1's memory controller. A
// container runtime mounts the container's own cgroup at /sys/fs/cgroup
// (v2 with a cgroup namespace; v1's controllers below it), so these are
// its limit. ternd does not walk /proc/self/cgroup and mountinfo to find a
// cgroup mounted elsewhere: outside a container neither file holds a
// limit, and the budget falls back to DefaultStateBudget.
var cgroupMemoryFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// Read returns the memory limit of the container ternd runs in, in bytes,
// and true; or false when no limit is set ("max", or cgroup v1's
// near-2^63 "unlimited") or neither file can be read.
func Read() (int64, bool) {
	return readFrom(os.ReadFile)
}

func readFrom(read func(string) ([]byte, error)) (int64, bool) {
	for _, f := range cgroupMemoryFiles {
		b, err := read(f)
		if err != nil {
			continue
		}
		return Parse(string(b))
	}
	return 0, false
}

// unlimitedV1 is the smallest value read as "no limit": cgroup v1 writes
// PAGE_COUNTER_MAX pages (9223372036854771712 bytes with 4 KiB pages) for
// an unlimited cgroup, and no container has 2^62 bytes.
const unlimitedV1 = 1 << 62

// Parse parses the contents of memory.max (cgroup v2: a
// number of bytes or "max") or memory.limit_in_bytes (cgroup v1: a number
// of bytes) with its trailing newline. It returns the limit and true, or
// false for "max", a value of 2^62 or more (v1's unlimited), 0, or
// anything that is not a number.
func Parse(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= unlimitedV1 {
		return 0, false
	}
	return n, true
}

// StateBudget is the state budget in bytes (0: none) from ternd's flag
// (flagMiB: >0 MiB, <0 none, 0 not given), else the config's
// limits.stateBudgetMiB (>0 MiB, NoLimit none, 0 not given), else half
// the container's memory limit (limit, 0 when none), else
// DefaultStateBudget. Half, because the state is live Go heap and Go's
// collector lets the heap grow to twice its live size between collections
// (GOGC=100), and the rest of ternd (listeners, buffers, goroutines) needs
// room beside it.
func StateBudget(flagMiB, cfgMiB int, limit int64) int64 {
	switch {
	case flagMiB > 0:
		return int64(flagMiB) << 20
	case flagMiB < 0:
		return 0
	case cfgMiB > 0:
		return int64(cfgMiB) << 20
	case cfgMiB < 0:
		return 0
	case limit > 0:
		return limit / 2
	}
	return DefaultStateBudget
}
