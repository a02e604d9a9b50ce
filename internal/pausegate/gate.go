// Package pausegate parks a fixed set of worker goroutines at a safe point
// of their loops and lets them go again: how a ternd stops reading its
// sockets while it hands them to its successor, without closing or
// shutting them down (the successor reads them next).
package pausegate

import (
	"sync"
	"sync/atomic"
)

// Gate is what the workers park at. The zero value is open.
type Gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	parked int
	// flag mirrors paused for Park's fast path: one atomic load per
	// worker loop while the gate is open.
	flag atomic.Bool
}

func (g *Gate) init() {
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
}

// Park is a worker's safe point: while the gate is paused it blocks, and
// counts the worker as parked.
func (g *Gate) Park() {
	if !g.flag.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		return
	}
	g.init()
	g.parked++
	g.cond.Broadcast()
	for g.paused {
		g.cond.Wait()
	}
	g.parked--
}

// Paused reports whether the gate is paused, for a worker to look at
// before it parks.
func (g *Gate) Paused() bool { return g.flag.Load() }

// Pause closes the gate, calls wake (which makes blocked workers return to
// their loops) and returns once n workers are parked.
func (g *Gate) Pause(n int, wake func()) {
	g.mu.Lock()
	g.init()
	g.paused = true
	g.flag.Store(true)
	g.mu.Unlock()
	wake()
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.parked < n {
		g.cond.Wait()
	}
}

// Resume opens the gate: parked workers go on.
func (g *Gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	g.paused = false
	g.flag.Store(false)
	g.cond.Broadcast()
}
