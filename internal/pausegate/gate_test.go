package pausegate

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestPauseParksEveryWorker: Pause returns only when every worker sits in
// Park, none passes it until Resume, and all go on after.
func TestPauseParksEveryWorker(t *testing.T) {
	var (
		g     Gate
		stop  atomic.Bool
		wg    sync.WaitGroup
		loops [4]atomic.Int64
	)
	for i := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				g.Park()
				loops[i].Add(1)
			}
		}()
	}
	g.Pause(len(loops), func() {})
	var at [4]int64
	for i := range loops {
		at[i] = loops[i].Load()
	}
	for i := range loops {
		if loops[i].Load() != at[i] {
			t.Errorf("worker %d ran while paused", i)
		}
	}
	stop.Store(true)
	g.Resume()
	wg.Wait()
}
