package sysblock

import (
	"runtime"
	"testing"
)

func TestEnterAddsOnePPerWorker(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	leaveA := Enter()
	if got := runtime.GOMAXPROCS(0); got != base+1 {
		t.Fatalf("one worker: GOMAXPROCS %d, want %d", got, base+1)
	}
	leaveB := Enter()
	if got := runtime.GOMAXPROCS(0); got != base+2 {
		t.Fatalf("two workers: GOMAXPROCS %d, want %d", got, base+2)
	}
	leaveA()
	if got := runtime.GOMAXPROCS(0); got != base+1 {
		t.Fatalf("one left: GOMAXPROCS %d, want %d", got, base+1)
	}
	leaveB()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("all left: GOMAXPROCS %d, want the base %d", got, base)
	}
}

// TestYielderPeriod checks the pacing (at most one yield per YieldEvery);
// that a yield lets the monitor see the P reschedule is what bench/PROFILE.md
// measured, not something a unit test can observe.
func TestYielderPeriod(t *testing.T) {
	var y Yielder
	y.Maybe()
	first := y.last
	if first.IsZero() {
		t.Fatal("first call did not yield")
	}
	y.Maybe()
	if !y.last.Equal(first) {
		t.Fatal("yielded again within YieldEvery")
	}
	y.last = first.Add(-YieldEvery)
	y.Maybe()
	if y.last.Equal(first.Add(-YieldEvery)) {
		t.Fatal("did not yield after YieldEvery")
	}
}
