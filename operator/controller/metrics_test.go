package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestLoopStateMetrics: events are "passed" while no render is pending and "throttled"
// while one is; a render starts a new generation, and its writes acknowledge it, counted by
// result. The loop writes metrics of its own here: the package's shared operator writes the
// process's meanwhile.
func TestLoopStateMetrics(t *testing.T) {
	m := newLoopMetrics()
	s := &loopState{m: m}
	passed, throttled := m.events.WithLabelValues("passed"), m.events.WithLabelValues("throttled")

	s.event()
	s.event()
	s.event()
	if p, th := value(passed), value(throttled); p != 1 || th != 2 {
		t.Errorf("three events before a render: %v passed, %v throttled; want 1 and 2", p, th)
	}
	gen := s.startRender()
	s.event() // arrives during the render: asks for the next one
	if p := value(passed); p != 2 {
		t.Errorf("an event during a render: %v passed in all, want 2", p)
	}
	s.rendered(time.Millisecond)
	s.updated(gen, time.Millisecond, nil)
	if g, a := value(m.generation), value(m.lastAcked); g != float64(gen) || a != float64(gen) {
		t.Errorf("generation %v, last acked %v; want both %d", g, a, gen)
	}
	gen2 := s.startRender()
	s.updated(gen2, time.Millisecond, errors.New("apply failed"))
	if gen2 != gen+1 {
		t.Errorf("generations %d then %d", gen, gen2)
	}
	if ok, errs := value(m.updates.WithLabelValues("success")), value(m.updateErrors); ok != 1 || errs != 1 {
		t.Errorf("updates: %v succeeded, %v failed; want 1 and 1", ok, errs)
	}
	if r := value(m.renders); r != 1 {
		t.Errorf("renders counted %v, want 1", r)
	}
}

func TestKindOf(t *testing.T) {
	for _, tt := range []struct {
		obj  any
		want string
	}{
		{&appsv1.DaemonSet{}, "DaemonSet"},
		{&gwapiv1.Gateway{}, "Gateway"},
		{appsv1.Deployment{}, "Deployment"},
		{nil, "Unknown"},
	} {
		if got := kindOf(tt.obj); got != tt.want {
			t.Errorf("kindOf(%T) = %q, want %q", tt.obj, got, tt.want)
		}
	}
}

// value reads a counter's or gauge's current value.
func value(m prometheus.Metric) float64 {
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		panic(err)
	}
	if c := out.GetCounter(); c != nil {
		return c.GetValue()
	}
	return out.GetGauge().GetValue()
}

// TestEnqueueThrottle: with no throttle an event queues the render at once; with
// --throttle-timeout the render waits (an hour here, so the test never sees it fire) and
// further events join it; every event is counted.
func TestEnqueueThrottle(t *testing.T) {
	for _, tt := range []struct {
		name     string
		throttle time.Duration
		wantLen  int
	}{
		{"at once", 0, 1},
		{"throttled", time.Hour, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{opts: Options{ThrottleTimeout: tt.throttle}, loop: &loopState{m: newLoopMetrics()}}
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			h := r.enqueue()
			// This loop's own counts: the package's shared operator, running against the
			// API server, moves the process-wide reconcile_events_total meanwhile.
			for range 3 {
				h.Create(context.Background(), event.CreateEvent{Object: &appsv1.DaemonSet{}}, q)
			}
			if q.Len() != tt.wantLen {
				t.Errorf("queue holds %d renders, want %d", q.Len(), tt.wantLen)
			}
			if p, th := r.loop.passed.Load(), r.loop.throttled.Load(); p != 1 || th != 2 {
				t.Errorf("events: %v passed, %v throttled; want 1 and 2", p, th)
			}
		})
	}
}
