package sysblock

import (
	"testing"
	"time"
)

// TestLinger walks a Linger through its states; no step depends on how
// long anything takes except "shorter than an hour".
func TestLinger(t *testing.T) {
	var off Linger
	off.Woke()
	if off.Wait() {
		t.Fatal("Period 0 lingered")
	}

	l := Linger{Period: time.Hour}
	if l.Wait() {
		t.Fatal("lingered before any wake-up")
	}
	l.Woke() // woke well within an hour: busy
	l.Period = time.Microsecond
	if !l.Wait() {
		t.Fatal("busy worker did not linger")
	}
	l.Polled(true)
	if !l.Wait() {
		t.Fatal("poll found work, but the next wait did not linger")
	}
	l.Polled(false)
	if l.Wait() {
		t.Fatal("poll found nothing, but the worker kept lingering")
	}
	l.since = time.Now().Add(-time.Second) // blocked longer than Period
	l.Woke()
	if l.Wait() {
		t.Fatal("a slow stream made the worker linger")
	}
}
