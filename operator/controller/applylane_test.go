package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tern-gw/tern/operator/render"
)

// laneRecorder is an apply function for applyLane tests: it records what it applied, in
// order, and how many applies ran at once; applies of Gateway block wait until release.
type laneRecorder struct {
	mu       sync.Mutex
	applied  []string // "name/version"
	running  int
	most     int
	block    string
	release  chan struct{}
	started  chan struct{}
	versions map[*render.GatewayResult]int
}

func (r *laneRecorder) apply(_ context.Context, it laneItem) []error {
	r.mu.Lock()
	r.running++
	r.most = max(r.most, r.running)
	v := r.versions[it.g]
	r.mu.Unlock()
	if it.g.Name == r.block {
		r.started <- struct{}{}
		<-r.release
	} else {
		time.Sleep(2 * time.Millisecond) // long enough for others to overlap
	}
	r.mu.Lock()
	r.running--
	r.applied = append(r.applied, fmt.Sprintf("%s/%d", it.g.Name, v))
	r.mu.Unlock()
	if it.g.Name == "fails" {
		return []error{errors.New("apply failed")}
	}
	return nil
}

// item makes Gateway name's render number version.
func (r *laneRecorder) item(name string, version int) laneItem {
	g := &render.GatewayResult{Namespace: "ns", Name: name}
	r.mu.Lock()
	r.versions[g] = version
	r.mu.Unlock()
	return laneItem{g: g}
}

func newLaneRecorder(block string) *laneRecorder {
	return &laneRecorder{block: block, release: make(chan struct{}), started: make(chan struct{}, 1),
		versions: map[*render.GatewayResult]int{}}
}

// TestApplyLane: the lane applies each Gateway's newest render, never an older one after a
// newer one, at most parallel Gateways at a time, and wait returns once all is applied.
func TestApplyLane(t *testing.T) {
	t.Run("newest render wins, in order", func(t *testing.T) {
		rec := newLaneRecorder("gw")
		l := newApplyLane(4, rec.apply)
		ctx := context.Background()
		l.submit(ctx, []laneItem{rec.item("gw", 1)})
		<-rec.started // render 1 is being applied
		l.submit(ctx, []laneItem{rec.item("gw", 2)})
		l.submit(ctx, []laneItem{rec.item("gw", 3), rec.item("other", 1)}) // replaces 2
		waited := make(chan struct{})
		go func() { l.wait(); close(waited) }()
		select {
		case <-waited:
			t.Fatal("wait returned while an apply was blocked")
		case <-time.After(50 * time.Millisecond):
		}
		close(rec.release)
		<-waited
		got := slices.Clone(rec.applied)
		slices.Sort(got[1:]) // the second batch's order is the goroutines'
		if want := []string{"gw/1", "gw/3", "other/1"}; !slices.Equal(got, want) {
			t.Errorf("applied %v, want %v", rec.applied, want)
		}
	})
	t.Run("parallel bound and errors", func(t *testing.T) {
		rec := newLaneRecorder("")
		l := newApplyLane(2, rec.apply)
		var failed error
		l.done = func(_ time.Duration, err error) { failed = err }
		var items []laneItem
		for i := range 6 {
			items = append(items, rec.item(fmt.Sprintf("gw-%d", i), 1))
		}
		items = append(items, rec.item("fails", 1))
		l.submit(context.Background(), items)
		l.wait()
		if len(rec.applied) != 7 || rec.most > 2 || rec.most < 1 {
			t.Errorf("applied %d (want 7), at most %d at once (want 1-2)", len(rec.applied), rec.most)
		}
		if failed == nil || failed.Error() != "apply failed" {
			t.Errorf("done got %v, want the failed apply's error", failed)
		}
	})
	t.Run("wait on an idle lane", func(t *testing.T) {
		l := newApplyLane(1, newLaneRecorder("").apply)
		l.wait()
		l.submit(context.Background(), nil)
		l.wait()
	})
}
