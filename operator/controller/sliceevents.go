package controller

import (
	"context"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// sliceSettle is how long after the last EndpointSlice event the full render runs that writes
// what the renders of the touched Gateways leave (statuses, pruning): a burst of endpoint
// changes, a rollout of a backend say, costs one full render at its end, not one per change.
// sliceSettleMax bounds the wait under endpoint changes that never stop.
const (
	sliceSettle    = time.Second
	sliceSettleMax = 10 * time.Second
)

// sliceEvents is when EndpointSlice events came that no full render has served yet, and the
// Services whose slice render waits. Safe for concurrent use; the zero value is ready.
type sliceEvents struct {
	mu          sync.Mutex
	first, last time.Time // zero first: every event served
	waiting     map[types.NamespacedName]bool
}

// note records an EndpointSlice event of Service svc at now.
func (s *sliceEvents) note(svc types.NamespacedName, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	if s.waiting == nil {
		s.waiting = map[types.NamespacedName]bool{}
	}
	s.waiting[svc] = true
}

// take starts the slice render of svc: it returns the Services whose slice events wait, svc
// and every other, all served by this render (their own requests then find nothing to do),
// or nil when a render since svc's event served it. A burst of events thus costs a few
// renders of the Gateways it touched, not one per event, as reconcileAll serves every event
// before it.
func (s *sliceEvents) take(svc types.NamespacedName) []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting[svc] {
		return nil
	}
	out := make([]types.NamespacedName, 0, len(s.waiting))
	for w := range s.waiting {
		out = append(out, w)
	}
	clear(s.waiting)
	return out
}

// retry records that the slice render of svcs failed: the request is retried, and must find
// them waiting.
func (s *sliceEvents) retry(svcs []types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[types.NamespacedName]bool{}
	}
	for _, svc := range svcs {
		s.waiting[svc] = true
	}
}

// settle reports whether the settleKey render is due at now: some event is unserved and
// either none came for sliceSettle or the first came sliceSettleMax ago. When it is not due
// and events are unserved, wait is how long until it is; when every event was served by a
// full render since, it is not due and wait is 0 (nothing left to do).
func (s *sliceEvents) settle(now time.Time) (due bool, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		return false, 0
	}
	wait = min(s.last.Add(sliceSettle).Sub(now), s.first.Add(sliceSettleMax).Sub(now))
	if wait > 0 {
		return false, wait
	}
	return true, 0
}

// rendering records that a full render starts: it reads the caches after every event noted
// so far, so it serves them.
func (s *sliceEvents) rendering() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first, s.last = time.Time{}, time.Time{}
	clear(s.waiting)
}

// dueAt records that the settleKey render is to run again at t: it failed (t is now, so that
// the retry of the request, which the work queue delays with its backoff, renders rather
// than waiting: a wait would reset the backoff, and a render that keeps failing would be
// repeated every sliceSettle), or asked to be repeated (a conflict, an offload poll).
func (s *sliceEvents) dueAt(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first, s.last = t.Add(-sliceSettleMax), t.Add(-sliceSettle)
}

// enqueueSlices returns the event handler of EndpointSlice events: each asks for the render of
// the Gateways that read the slices of its Service (the Service's key) at once, and for the
// settleKey render; a slice of no Service (no kubernetes.io/service-name label), and every
// slice under Options.ThrottleTimeout, asks for the full render as other events do. Each
// event is counted in reconcile_events_total as others are.
func (r *Reconciler) enqueueSlices() handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		var svcs []types.NamespacedName
		for _, o := range objs {
			if o == nil {
				continue
			}
			name := o.GetLabels()[discoveryv1.LabelServiceName]
			if name == "" || o.GetNamespace() == "" || r.opts.ThrottleTimeout > 0 {
				svcs = nil
				break
			}
			svcs = append(svcs, types.NamespacedName{Namespace: o.GetNamespace(), Name: name})
		}
		if len(svcs) == 0 {
			r.enqueueRender(q)
			return
		}
		r.loop.event()
		for _, svc := range svcs {
			r.slices.note(svc, time.Now())
			q.Add(reconcile.Request{NamespacedName: svc})
		}
		q.AddAfter(settleKey, sliceSettle)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.ObjectOld, e.ObjectNew) // the label may have changed: both Services' Gateways
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
	}
}
