package controller

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's stunner_gateway_operator_* metrics: the names, types, labels and histogram
// buckets of STUNner's gateway operator, so dashboards and alerts written for it work on
// Tern's. They are registered in controller-runtime's registry, which the manager serves on
// --metrics-bind-address next to controller_runtime_*.
//
// STUNner's operator runs three loops: the operator loop (events, throttling), the renderer
// and the updater (writes to the API server). Tern runs one reconcile, which collects its
// inputs, renders and writes; its metrics map onto STUNner's as follows:
//   - reconcile_events_total{result}: each watch event; "passed" when it asks for a render
//     (none is pending), "throttled" when it is folded into a render already pending.
//   - render_total, render_time_seconds: each render.Render, and how long it took with the
//     listing of its inputs from the cache.
//   - update_total{result}, update_errors_total, update_time_seconds: each reconcile's
//     writes (objects, statuses, pruning) after its render; "error" when any write failed.
//   - resource_operations_total{scope,kind,operation}: each object write, scope "spec" (a
//     rendered object: attempt, then suppressed (unchanged since the last apply), created,
//     updated, none (applied, the server changed nothing) or error) or "status" (attempt,
//     then suppressed (nothing to change), updated or error), kind the object's Go type name.
//   - generation: the number of renders since start; generation_last_acked: the generation
//     whose writes last completed.
//   - {operator,renderer,updater}_loop_last_active_timestamp_seconds: the last time each
//     part was seen alive, in Unix seconds: at each event, render and write phase, and every
//     loopHeartbeat while no reconcile runs. A value that stops advancing while a reconcile
//     runs means that reconcile is stuck.
var metricResourceOperations = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "stunner_gateway_operator_resource_operations_total",
	Help: "Total number of Kubernetes API operations performed by the updater thread.",
}, []string{"scope", "kind", "operation"})

// loopMetrics are the metrics of the reconcile loop (loopState): the process's own,
// operatorMetrics, registered with controller-runtime's registry, or a test's.
type loopMetrics struct {
	renders, updateErrors                   prometheus.Counter
	renderTime, updateTime                  prometheus.Histogram
	updates, events                         *prometheus.CounterVec
	generation, lastAcked                   prometheus.Gauge
	operatorLoop, rendererLoop, updaterLoop prometheus.Gauge
}

// operatorMetrics are the process's loop metrics.
var operatorMetrics = newLoopMetrics()

// newLoopMetrics returns a set of loop metrics, not registered anywhere.
func newLoopMetrics() *loopMetrics {
	return &loopMetrics{
		renders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stunner_gateway_operator_render_total",
			Help: "Total number of render cycles executed by the renderer thread.",
		}),
		renderTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:                            "stunner_gateway_operator_render_time_seconds",
			Help:                            "Duration of render cycles executed by the renderer thread.",
			Buckets:                         reconcileBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stunner_gateway_operator_update_total",
			Help: "Total number of update cycles executed by the updater thread.",
		}, []string{"result"}),
		updateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stunner_gateway_operator_update_errors_total",
			Help: "Total number of update cycles that returned an error.",
		}),
		updateTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:                            "stunner_gateway_operator_update_time_seconds",
			Help:                            "Duration of update cycles executed by the updater thread.",
			Buckets:                         reconcileBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stunner_gateway_operator_reconcile_events_total",
			Help: "Total number of reconcile events received by the operator event loop.",
		}, []string{"result"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stunner_gateway_operator_generation",
			Help: "Current config generation number.",
		}),
		lastAcked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stunner_gateway_operator_generation_last_acked",
			Help: "Generation number of the last update acknowledged by the updater thread.",
		}),
		operatorLoop: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stunner_gateway_operator_operator_loop_last_active_timestamp_seconds",
			Help: "Unix timestamp of the last operator main-loop select iteration; stale values indicate the loop is hung.",
		}),
		rendererLoop: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stunner_gateway_operator_renderer_loop_last_active_timestamp_seconds",
			Help: "Unix timestamp of the last renderer goroutine select iteration; stale values indicate the loop is hung.",
		}),
		updaterLoop: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stunner_gateway_operator_updater_loop_last_active_timestamp_seconds",
			Help: "Unix timestamp of the last updater goroutine select iteration; stale values indicate the loop is hung.",
		}),
	}
}

// reconcileBuckets are controller-runtime's reconcile_time_seconds buckets, which STUNner's
// render and update histograms use too, so the three are comparable.
var reconcileBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
	0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
	5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
}

// loopHeartbeat is how often the loop gauges advance while no reconcile runs (STUNner's 5 s).
const loopHeartbeat = 5 * time.Second

// The operations of resource_operations_total, STUNner's words.
const (
	opAttempt    = "attempt"
	opSuppressed = "suppressed"
	opCreated    = "created"
	opUpdated    = "updated"
	opNone       = "none"
	opError      = "error"
)

func init() {
	m := operatorMetrics
	ctrlmetrics.Registry.MustRegister(m.renders, m.renderTime, m.updates, m.updateErrors, m.updateTime,
		metricResourceOperations, m.events, m.generation, m.lastAcked, m.operatorLoop, m.rendererLoop, m.updaterLoop)
}

// loopState is what the metrics need to know of the reconcile loop: whether a render is
// pending (asked for by an event, not started yet), whether a reconcile runs, and the
// generation.
type loopState struct {
	pending    atomic.Bool
	running    atomic.Bool
	mu         sync.Mutex
	generation int64
	// passed and throttled count this loop's events, as reconcile_events_total does for
	// every loop of the process.
	passed, throttled atomic.Uint64
	// m are the metrics it writes; nil: operatorMetrics.
	m *loopMetrics
}

func (s *loopState) metrics() *loopMetrics {
	if s.m != nil {
		return s.m
	}
	return operatorMetrics
}

// event counts a watch event: "passed" when it asks for a render, "throttled" when a render
// is pending already and the event is folded into it.
func (s *loopState) event() {
	s.metrics().operatorLoop.Set(nowSeconds())
	if s.pending.Swap(true) {
		s.throttled.Add(1)
		s.metrics().events.WithLabelValues("throttled").Inc()
		return
	}
	s.passed.Add(1)
	s.metrics().events.WithLabelValues("passed").Inc()
}

// startRender marks a reconcile as started: pending events are now being served, and
// returns the new generation.
func (s *loopState) startRender() int64 {
	s.running.Store(true)
	s.pending.Store(false)
	now := nowSeconds()
	s.metrics().operatorLoop.Set(now)
	s.metrics().rendererLoop.Set(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.generation++
	s.metrics().generation.Set(float64(s.generation))
	return s.generation
}

// rendered records a render that took d (with the listing of its inputs).
func (s *loopState) rendered(d time.Duration) {
	s.metrics().renders.Inc()
	s.metrics().renderTime.Observe(d.Seconds())
	now := nowSeconds()
	s.metrics().rendererLoop.Set(now)
	s.metrics().updaterLoop.Set(now)
}

// updated records the writes of generation gen, which took d and failed when err is set.
func (s *loopState) updated(gen int64, d time.Duration, err error) {
	s.metrics().updateTime.Observe(d.Seconds())
	if err != nil {
		s.metrics().updates.WithLabelValues("error").Inc()
		s.metrics().updateErrors.Inc()
	} else {
		s.metrics().updates.WithLabelValues("success").Inc()
	}
	s.metrics().lastAcked.Set(float64(gen))
	s.metrics().updaterLoop.Set(nowSeconds())
	s.running.Store(false)
}

// heartbeat advances the loop gauges every loopHeartbeat while no reconcile runs, until ctx
// ends. It is a manager Runnable.
func (s *loopState) heartbeat(ctx context.Context) error {
	beat := func() {
		if s.running.Load() {
			return
		}
		now := nowSeconds()
		s.metrics().operatorLoop.Set(now)
		s.metrics().rendererLoop.Set(now)
		s.metrics().updaterLoop.Set(now)
	}
	beat()
	t := time.NewTicker(loopHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			beat()
		}
	}
}

func nowSeconds() float64 { return float64(time.Now().Unix()) }

// countOp counts one operation on obj in resource_operations_total.
func countOp(scope string, obj any, op string) {
	metricResourceOperations.WithLabelValues(scope, kindOf(obj), op).Inc()
}

// kindOf is the Go type name of obj ("Deployment", "UDPRoute"), as STUNner labels kinds.
func kindOf(obj any) string {
	t := reflect.TypeOf(obj)
	if t == nil {
		return "Unknown"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
