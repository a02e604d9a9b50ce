package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/operator/render"
)

// laneItem is one Gateway's rendered objects and the Gateway they are applied for.
type laneItem struct {
	g  *render.GatewayResult
	gw *gwapiv1.Gateway
}

// applyLane applies, behind the reconcile loop, the objects of the Gateways that slice renders
// (reconcileSlices) rendered. A slice render publishes its configs to the config discovery
// service, where the dataplane pods take them, and hands the objects here instead of waiting
// for the API server: the slice render after it, and that render's configs, need not wait for
// these applies (under a burst of EndpointSlice changes those waits were most of a change's
// latency; bench/CLUSTER.md, "Config at scale").
//
// Order: per Gateway the newest render wins. The lane applies in batches, a batch holding at
// most one render of a Gateway, up to parallel Gateways at a time, and a batch starts when the
// one before it is done, so an older render of a Gateway is never applied after a newer one;
// a render submitted while an older one of the same Gateway waits replaces it. The full render
// (reconcileAll) waits for the lane to empty before it applies, so that it, the newest, is
// applied last. A failed apply is not retried here: the full render that the same
// EndpointSlice events asked for (sliceSettle) applies every Gateway again.
//
// mu is a leaf: apply runs without it.
type applyLane struct {
	apply    func(ctx context.Context, it laneItem) []error
	parallel int
	// done, when set, is told how long each batch took and what failed in it.
	done func(d time.Duration, err error)

	mu      sync.Mutex
	idle    *sync.Cond // signalled when busy turns false
	pending map[types.NamespacedName]laneItem
	busy    bool
	ctx     context.Context // of the latest submit, for the applies
}

func newApplyLane(parallel int, apply func(context.Context, laneItem) []error) *applyLane {
	l := &applyLane{apply: apply, parallel: max(parallel, 1), pending: map[types.NamespacedName]laneItem{}}
	l.idle = sync.NewCond(&l.mu)
	return l
}

// submit queues items, replacing any queued render of the same Gateway, and returns at once.
// The applies run with ctx, which must outlive the caller's Reconcile: the controller's
// context is (it ends when the manager stops), as long as the controller sets no
// ReconciliationTimeout, which would end it with each Reconcile.
func (l *applyLane) submit(ctx context.Context, items []laneItem) {
	if len(items) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range items {
		l.pending[types.NamespacedName{Namespace: it.g.Namespace, Name: it.g.Name}] = it
	}
	l.ctx = ctx
	if !l.busy {
		l.busy = true
		go l.run()
	}
}

// wait returns once nothing is queued or being applied.
func (l *applyLane) wait() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.busy {
		l.idle.Wait()
	}
}

// run applies batches until the lane is empty.
func (l *applyLane) run() {
	for {
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.busy = false
			l.idle.Broadcast()
			l.mu.Unlock()
			return
		}
		batch, ctx := l.pending, l.ctx
		l.pending = make(map[types.NamespacedName]laneItem, len(batch))
		l.mu.Unlock()

		start := time.Now()
		var (
			mu   sync.Mutex
			errs []error
			wg   sync.WaitGroup
			sem  = make(chan struct{}, l.parallel)
		)
		for _, it := range batch {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if e := l.apply(ctx, it); len(e) > 0 {
					mu.Lock()
					errs = append(errs, e...)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if l.done != nil {
			l.done(time.Since(start), errors.Join(errs...))
		}
	}
}
