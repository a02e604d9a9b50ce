package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestSliceEventsSettle: the settleKey render is due a settle period after the last event, or
// the longest wait after the first under events that never stop; a full render serves every
// event noted before it; a failed one is due again at once (its retry's backoff is the wait),
// and one that asks to be repeated when it asks.
func TestSliceEventsSettle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	svc := types.NamespacedName{Namespace: "ns", Name: "sfu"}
	var s sliceEvents
	if due, wait := s.settle(t0); due || wait != 0 {
		t.Fatalf("no events: due %v, wait %v; want nothing to do", due, wait)
	}
	s.note(svc, t0)
	s.note(svc, t0.Add(400*time.Millisecond))
	if due, wait := s.settle(t0.Add(500 * time.Millisecond)); due || wait != 900*time.Millisecond {
		t.Errorf("0.1 s after the last event: due %v, wait %v; want a wait of 0.9 s", due, wait)
	}
	if due, _ := s.settle(t0.Add(1400 * time.Millisecond)); !due {
		t.Error("a settle period after the last event: not due")
	}
	for d := time.Duration(0); d < sliceSettleMax; d += sliceSettle / 2 { // events that never stop
		s.note(svc, t0.Add(d))
	}
	if due, _ := s.settle(t0.Add(sliceSettleMax)); !due {
		t.Error("the longest wait after the first event: not due")
	}
	s.rendering()
	if due, wait := s.settle(t0.Add(time.Hour)); due || wait != 0 {
		t.Errorf("after a full render: due %v, wait %v; want nothing to do", due, wait)
	}
	s.dueAt(t0)
	if due, wait := s.settle(t0); !due {
		t.Errorf("after a failed full render: due %v, wait %v; want due at once (the retry's backoff is the wait)", due, wait)
	}
	s.rendering()
	s.dueAt(t0.Add(conflictRetry)) // a render that asked to be repeated
	if due, wait := s.settle(t0); due || wait != conflictRetry {
		t.Errorf("a render asking to be repeated later: due %v, wait %v; want a wait of %v", due, wait, conflictRetry)
	}
	if due, _ := s.settle(t0.Add(conflictRetry)); !due {
		t.Error("a render asking to be repeated: not due when asked")
	}
}

// TestSliceEventsTake: a slice render takes every waiting Service, so the requests of the
// others find nothing to do; a failed one puts them back; a full render serves them all.
func TestSliceEventsTake(t *testing.T) {
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	var s sliceEvents
	if got := s.take(a); got != nil {
		t.Fatalf("take with nothing waiting: %v", got)
	}
	now := time.Now()
	s.note(a, now)
	s.note(b, now)
	got := s.take(a)
	slices.SortFunc(got, func(x, y types.NamespacedName) int { return cmpNames(x, y) })
	if !slices.Equal(got, []types.NamespacedName{a, b}) {
		t.Fatalf("take(a) = %v, want a and b", got)
	}
	if got := s.take(b); got != nil {
		t.Errorf("take(b) after a took it: %v", got)
	}
	s.retry([]types.NamespacedName{a, b})
	if got := s.take(b); len(got) != 2 {
		t.Errorf("take(b) after a failed render: %v, want both", got)
	}
	s.note(a, now)
	s.rendering()
	if got := s.take(a); got != nil {
		t.Errorf("take(a) after a full render: %v", got)
	}
}

func cmpNames(x, y types.NamespacedName) int {
	switch {
	case x.String() < y.String():
		return -1
	case x.String() > y.String():
		return 1
	}
	return 0
}

// TestEnqueueSlices: an EndpointSlice event asks for its Service's render at once and for
// the settleKey render later (both Services' when an update moved the slice); a slice of no
// Service, and any slice under a throttle timeout, asks for the full render.
func TestEnqueueSlices(t *testing.T) {
	slice := func(svc string) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "es"}}
		if svc != "" {
			es.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
		}
		return es
	}
	key := func(svc string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: svc}}
	}
	for _, tt := range []struct {
		name     string
		throttle time.Duration
		old, new string
		want     []reconcile.Request
	}{
		{name: "created", new: "sfu", want: []reconcile.Request{key("sfu")}},
		{name: "moved", old: "a", new: "b", want: []reconcile.Request{key("a"), key("b")}},
		{name: "no Service", new: "", want: []reconcile.Request{renderKey}},
		{name: "throttled", throttle: time.Hour, new: "sfu"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{opts: Options{ThrottleTimeout: tt.throttle}, loop: &loopState{}}
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			h := r.enqueueSlices()
			if tt.old != "" {
				h.Update(context.Background(), event.UpdateEvent{ObjectOld: slice(tt.old), ObjectNew: slice(tt.new)}, q)
			} else {
				h.Create(context.Background(), event.CreateEvent{Object: slice(tt.new)}, q)
			}
			var got []reconcile.Request
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req)
				q.Done(req)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("queued %v, want %v (the settle render comes later)", got, tt.want)
			}
		})
	}
}

// TestOwnWrites: the update event of a ConfigMap as the operator applied it asks for no render;
// any change the operator would undo does.
func TestOwnWrites(t *testing.T) {
	rendered := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Gateway", Name: "gw", UID: "u1", Controller: ptr(true)}}},
		Data: map[string]string{"tern.yaml": "a"}}
	var o ownWrites
	o.applying(rendered, "h1")
	written := func(edit func(cm *corev1.ConfigMap)) *corev1.ConfigMap {
		cm := rendered.DeepCopy()
		cm.Annotations = map[string]string{HashAnnotation: "h1"}
		cm.ResourceVersion = "7"
		edit(cm)
		return cm
	}
	for _, tt := range []struct {
		name string
		edit func(cm *corev1.ConfigMap)
		own  bool
	}{
		{"as applied", func(*corev1.ConfigMap) {}, true},
		{"another label", func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"x": "y"} }, true},
		{"data edited", func(cm *corev1.ConfigMap) { cm.Data["tern.yaml"] = "b" }, false},
		{"binary data added", func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"k": {1}} }, false},
		{"hash edited", func(cm *corev1.ConfigMap) { cm.Annotations[HashAnnotation] = "h0" }, false},
		{"hash removed", func(cm *corev1.ConfigMap) { delete(cm.Annotations, HashAnnotation) }, false},
		{"controller changed", func(cm *corev1.ConfigMap) { cm.OwnerReferences[0].UID = "u2" }, false},
		{"another ConfigMap", func(cm *corev1.ConfigMap) { cm.Name = "other" }, false},
	} {
		if got := o.own(written(tt.edit)); got != tt.own {
			t.Errorf("%s: own = %v, want %v", tt.name, got, tt.own)
		}
	}
	if o.own(&corev1.Secret{ObjectMeta: rendered.ObjectMeta}) {
		t.Error("a Secret: own")
	}
}
