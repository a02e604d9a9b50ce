package sysblock

import (
	"runtime"
	"sync"
)

// headroom keeps GOMAXPROCS at the process's own value plus one P per
// running worker.
//
// A worker blocked in a system call keeps its P (the runtime's permit to
// run Go code) for up to 10 ms before the runtime's monitor takes it back.
// With as many workers as Ps, a worker woken by a packet finds no free P and
// waits for that monitor: ternd's round trips at 500 packets/s had a p99 of
// 7-9 ms instead of about 0.5 ms. One P per worker on top leaves the
// process's own Ps for everything else; blocked workers use no CPU, so this
// does not oversubscribe the machine.
var headroom struct {
	mu      sync.Mutex
	base    int // GOMAXPROCS before the first worker
	workers int
}

// Enter registers a blocking worker for as long as it runs: call it when the
// worker starts and call the function it returns when the worker exits.
// Each call changes GOMAXPROCS, which stops the world briefly, so it is for
// worker start and stop, never per packet. GOMAXPROCS set by the process
// (or the environment) before the first worker is the base it adds to.
func Enter() (leave func()) {
	adjust(1)
	return func() { adjust(-1) }
}

func adjust(delta int) {
	h := &headroom
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.workers == 0 {
		h.base = runtime.GOMAXPROCS(0)
	}
	h.workers += delta
	runtime.GOMAXPROCS(h.base + h.workers)
}
