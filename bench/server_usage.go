package bench

import (
	"time"

	"github.com/tern-gw/tern/bench/procstat"
)

// cpuMeter reads a server's CPU time at the start and end of a window.
type cpuMeter struct {
	pid   int
	start time.Duration
	ok    bool
}

func startCPU(pid int) cpuMeter {
	if pid <= 0 {
		return cpuMeter{}
	}
	c, err := procstat.CPU(pid)
	return cpuMeter{pid: pid, start: c, ok: err == nil}
}

// stop returns the CPU time used since startCPU; ok is false when the
// server's PID is unknown or /proc could not be read.
func (m cpuMeter) stop() (time.Duration, bool) {
	if !m.ok {
		return 0, false
	}
	c, err := procstat.CPU(m.pid)
	if err != nil {
		return 0, false
	}
	return c - m.start, true
}
