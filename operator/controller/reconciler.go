package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/operator/render"
)

// Options configure the controller.
type Options struct {
	// ControllerName selects the GatewayClasses to manage (spec.controllerName).
	// Default render.DefaultControllerName, STUNner's.
	ControllerName string
	// CredentialsDir is where the dataplane pods mount their credentials
	// Secret. Default render.CredentialsDir; tests that run ternd outside
	// a pod point it at a directory of their own.
	CredentialsDir string
	// ThrottleTimeout delays each render by this long after the event that
	// asked for it, so that a burst of changes makes one render (STUNner's
	// --throttle-timeout). Default 0: at once.
	ThrottleTimeout time.Duration
	// LabelFilter are the Gateway label keys not copied to the dataplane
	// workload (render.Options.LabelFilter; nil means render's default).
	LabelFilter []string
	// ConfigDiscoveryNamespace and ConfigDiscoveryPort say where the config
	// discovery service is that CDS pods watch: the Service
	// stunner-config-discovery of that namespace, by its ClusterIP, else by
	// its DNS name on that port (render.Options; default render's).
	ConfigDiscoveryNamespace string
	ConfigDiscoveryPort      int
	// NoConfigDiscovery says the operator serves no config discovery service:
	// Dataplanes without configSource render ConfigMap mode
	// (render.Options.NoConfigDiscovery).
	NoConfigDiscovery bool
	// Configs, when set, gets every Gateway's config as the config
	// discovery service serves it (render.GatewayResult.CDSConfig) after
	// each render, before the objects are applied: the operator's CDS
	// (operator/cds.Store).
	Configs ConfigSink
	// OffloadReportPort is the port where the operator reads each ready
	// dataplane pod's offload report (offloadmode.ReportPath) for the
	// Gateway's OffloadActive condition. Default render.HealthPort;
	// tests serve reports on a port of their own.
	OffloadReportPort int
}

// ConfigSink receives the served configs, keyed "namespace/name", after each render.
type ConfigSink interface {
	// Update replaces the served state of the world: the configs
	// (render.GatewayResult.CDSConfig) and the same with credentials
	// (CDSConfigWithCredentials).
	Update(configs, withCredentials map[string][]byte)
	// Get returns what is served for a Gateway.
	Get(namespace, name string) (config, withCredentials []byte, ok bool)
}

func (o Options) withDefaults() Options {
	if o.ControllerName == "" {
		o.ControllerName = render.DefaultControllerName
	}
	return o
}

// renderKey is the work-queue key of the full render, which every event but an EndpointSlice
// event asks for. Its namespace is empty, as no Service's is.
var renderKey = ctrl.Request{NamespacedName: types.NamespacedName{Name: "render"}}

// sliceApplyParallel is how many Gateways' objects the apply lane applies at once.
const sliceApplyParallel = 8

// settleKey is the work-queue key of the full render that follows EndpointSlice events
// (sliceEvents.settle).
var settleKey = ctrl.Request{NamespacedName: types.NamespacedName{Name: "settle"}}

// Reconciler renders all managed Gateways and writes the results. Create it with Setup.
type Reconciler struct {
	client client.Client
	// apiReader reads from the API server, past the informer cache: for the few reads whose
	// answer must include writes the cache may not have seen yet.
	apiReader client.Reader
	opts      Options
	// gatewayRoutes is how Gateway API UDPRoutes are read, depending on the versions the
	// cluster serves; nil when it serves none.
	gatewayRoutes *routeVersion
	log           logr.Logger
	// loop is what the stunner_gateway_operator_* metrics know of the reconciles.
	loop *loopState
	// events records what the operator did to a Gateway's objects that users should see in
	// `kubectl describe gateway`: taking over or replacing what STUNner's operator rendered.
	events events.EventRecorder
	// offload reads the dataplane pods' offload reports.
	offload *offloadReader
	// memo keeps what the last renders marshalled and checked (render.Memo), so that a
	// change re-marshals only the configs it changed.
	memo render.Memo
	// applied and routes remember which rendered objects and route statuses the cluster
	// already holds (appliedMemo, routeMemo), so that an unchanged one costs a cache read.
	applied appliedMemo
	routes  routeMemo
	// own is the operator's own ConfigMap writes, whose watch events ask for no render.
	own ownWrites
	// slices is when EndpointSlice events came, for the settleKey render.
	slices sliceEvents
	// published and publishedPrivate are what publishConfigs last handed to Options.Configs;
	// cdsMemo, by Gateway ("namespace/name"), what it last made of each Gateway's ConfigMap
	// document and credentials. All three are publishMu's.
	publishMu                   sync.Mutex
	published, publishedPrivate map[string][]byte
	cdsMemo                     map[string]cdsMemoEntry
	// lane applies slice renders' objects behind the loop (slicesLane).
	laneOnce sync.Once
	lane     *applyLane
}

// slicesLane returns the reconciler's apply lane, made on first use.
func (r *Reconciler) slicesLane() *applyLane {
	r.laneOnce.Do(func() {
		r.lane = newApplyLane(sliceApplyParallel, func(ctx context.Context, it laneItem) []error {
			_, _, errs := r.applyGateway(ctx, it.g, it.gw)
			return errs
		})
		r.lane.done = func(d time.Duration, err error) {
			if err != nil {
				// The settle render that the same events asked for applies it again.
				r.loop.metrics().updateErrors.Inc()
				r.log.Error(err, "applying the objects of a slice render", "took", d)
			}
		}
	})
	return r.lane
}

// cdsMemoEntry is a Gateway's two CDS configs (render.GatewayResult.CDSConfigs) and what they
// were made of: the ConfigMap's document, which is the whole dataplane config, and the
// credentials Secret's values, which only the private one holds.
type cdsMemoEntry struct {
	doc, password, secret string
	public, private       []byte
}

// cdsMemoFor returns g's entry with only what it is made of filled in.
func cdsMemoFor(g *render.GatewayResult) cdsMemoEntry {
	var e cdsMemoEntry
	if g.ConfigMap != nil {
		e.doc = g.ConfigMap.Data[render.ConfigKey]
	}
	if g.Secret != nil {
		e.password = string(g.Secret.Data[render.CredentialsKeyPassword])
		e.secret = string(g.Secret.Data[render.CredentialsKeySharedSecret])
	}
	return e
}

// Reconcile serves the three kinds of request on the work queue:
//
//   - renderKey, asked for by every event but EndpointSlice events (and by those under
//     Options.ThrottleTimeout): a full render (reconcileAll);
//   - a Service's namespace and name, asked for by a change of its EndpointSlices: the
//     Gateways whose rendering reads those slices (render.SliceGateways) rendered alone and
//     their objects written (reconcileSlices), so that an endpoint change costs those
//     Gateways' work, not every Gateway's;
//   - settleKey, asked for by the same EndpointSlice events: the full render that writes
//     what reconcileSlices leaves (route, Gateway and object statuses, pruning), once no
//     EndpointSlice event has come for sliceSettle, or sliceSettleMax after the first one.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	switch {
	case req == renderKey:
		return r.reconcileAll(ctx)
	case req == settleKey:
		due, wait := r.slices.settle(time.Now())
		if !due {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		// The retry of settleKey, after an error or when the render asks for one, must find
		// the render due.
		res, err := r.reconcileAll(ctx)
		switch {
		case err != nil:
			r.slices.dueAt(time.Now())
		case res.RequeueAfter > 0:
			r.slices.dueAt(time.Now().Add(res.RequeueAfter))
		}
		return res, err
	}
	return r.reconcileSlices(ctx, req.NamespacedName)
}

// reconcileAll lists every input object from the caches, renders every Gateway, and writes
// the rendered objects and the statuses. A failure to write one Gateway's objects does not
// stop the others; the errors are returned together so the work queue retries with backoff.
// A Gateway whose objects' names are taken by objects created neither by the operator nor by
// STUNner's operator for it gets none of them applied and Programmed=False with
// ReasonConflict (foreignObjects); the render is repeated every conflictRetry until the names
// are free.
func (r *Reconciler) reconcileAll(ctx context.Context) (ctrl.Result, error) {
	start := time.Now()
	gen := r.loop.startRender()
	// What EndpointSlice events asked for so far, this render does; on an error, the retry
	// of the request does.
	r.slices.rendering()
	// The slice renders' applies before this render's: this one is the newest.
	r.slicesLane().wait()
	in, err := r.collect(ctx)
	if err != nil {
		r.loop.updated(gen, 0, err)
		return ctrl.Result{}, fmt.Errorf("list inputs: %w", err)
	}
	r.applied.rotate()
	r.routes.rotate()
	res := render.Render(in, r.renderOptions(&r.memo))
	r.loop.rendered(time.Since(start))
	writeStart := time.Now()
	for _, p := range res.Problems {
		r.log.V(1).Info("render problem", "object", p.Object.String(), "field", p.Field, "severity", p.Severity, "message", p.Message)
	}

	if r.opts.Configs != nil {
		r.publishConfigs(res, false)
	}

	gateways := gatewaysByName(in)
	var errs []error
	var retry time.Duration // set while a Gateway has a conflict or asks for offload
	for i := range res.Gateways {
		g := &res.Gateways[i]
		gw := gateways[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}]
		if gw == nil { // render only reports on Gateways of its input; never expected
			errs = append(errs, fmt.Errorf("rendered Gateway %s/%s is not in the input", g.Namespace, g.Name))
			continue
		}
		status, conflict, gerrs := r.applyGateway(ctx, g, gw)
		errs = append(errs, gerrs...)
		if status == nil { // its objects could not be read
			continue
		}
		if conflict {
			retry = conflictRetry
		}
		status, poll := r.withOffloadActive(ctx, gw, status)
		if poll && (retry == 0 || retry > offloadPoll) {
			retry = offloadPoll
		}
		if err := r.writeGatewayStatus(ctx, gw, status); err != nil {
			errs = append(errs, fmt.Errorf("gateway %s/%s: status: %w", g.Namespace, g.Name, err))
		}
	}
	if err := r.writeClassStatuses(ctx, in.GatewayClasses, res.GatewayClasses); err != nil {
		errs = append(errs, err)
	}
	if err := r.writeRouteStatuses(ctx, in, res); err != nil {
		errs = append(errs, err)
	}
	if err := r.writeObjectStatuses(ctx, in, res); err != nil {
		errs = append(errs, err)
	}
	if err := r.prune(ctx, in, res); err != nil {
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	r.loop.updated(gen, time.Since(writeStart), err)
	r.log.V(1).Info("rendered", "gateways", len(res.Gateways), "problems", len(res.Problems), "took", time.Since(start))
	return ctrl.Result{RequeueAfter: retry}, err
}

// reconcileSlices renders the Gateways whose rendering reads the EndpointSlices of Service
// svc and of every other Service whose slice events wait (sliceEvents.take;
// render.SliceGateways), each as the full render would, publishes their configs and hands
// their objects to the apply lane (applyLane), which applies them as reconcileAll does,
// behind this loop; it writes no status and prunes nothing, which the settleKey
// render that the same events asked for does. A Gateway with a conflict gets nothing
// applied here either.
func (r *Reconciler) reconcileSlices(ctx context.Context, svc types.NamespacedName) (res ctrl.Result, err error) {
	svcs := r.slices.take(svc)
	if svcs == nil { // a render since the event served it
		return ctrl.Result{}, nil
	}
	defer func() {
		if err != nil { // the request is retried: it must find its events unserved
			r.slices.retry(svcs)
		}
	}()
	start := time.Now()
	gen := r.loop.startRender()
	// Render only reads the Input, and nothing here or in the apply lane (which keeps the
	// Gateways until it has applied their objects) writes what it lists: no copies. The
	// informers replace the objects they cache, never change them in place.
	in, err := r.collect(ctx, client.UnsafeDisableDeepCopy)
	if err != nil {
		r.loop.updated(gen, 0, err)
		return ctrl.Result{}, fmt.Errorf("list inputs: %w", err)
	}
	sub, rendered := r.renderSlices(in, svcs)
	r.loop.rendered(time.Since(start))
	writeStart := time.Now()
	if r.opts.Configs != nil {
		r.publishConfigs(rendered, true)
	}
	// The objects go to the apply lane, which applies them behind this loop: the next slice
	// render, and its configs, need not wait for the API server.
	gateways := gatewaysByName(sub)
	items := make([]laneItem, 0, len(rendered.Gateways))
	var errs []error
	for i := range rendered.Gateways {
		g := &rendered.Gateways[i]
		gw := gateways[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}]
		if gw == nil {
			errs = append(errs, fmt.Errorf("rendered Gateway %s/%s is not in the input", g.Namespace, g.Name))
			continue
		}
		items = append(items, laneItem{g: g, gw: gw})
	}
	r.slicesLane().submit(ctx, items)
	err = errors.Join(errs...)
	r.loop.updated(gen, time.Since(writeStart), err)
	r.log.V(1).Info("rendered for EndpointSlice changes", "services", len(svcs), "gateways", len(rendered.Gateways), "took", time.Since(start))
	return ctrl.Result{}, err
}

// renderSlices renders, from in, the Gateways whose rendering reads the EndpointSlices of the
// Services svcs (render.SliceGateways), and returns the Input it rendered (in with those
// Gateways only) and the result: each Gateway's result is the full render's.
func (r *Reconciler) renderSlices(in *render.Input, svcs []types.NamespacedName) (*render.Input, *render.Result) {
	touched := map[render.GatewayName]bool{}
	for _, svc := range svcs {
		for _, g := range render.SliceGateways(in, svc.Namespace, svc.Name) {
			touched[g] = true
		}
	}
	sub := *in
	sub.Gateways = nil
	for _, gw := range in.Gateways {
		if touched[render.GatewayName{Namespace: gw.Namespace, Name: gw.Name}] {
			sub.Gateways = append(sub.Gateways, gw)
		}
	}
	// No memo: it keeps what the last two renders used, and this render uses the configs of
	// a few Gateways only.
	return &sub, render.Render(&sub, r.renderOptions(nil))
}

func (r *Reconciler) renderOptions(memo *render.Memo) render.Options {
	return render.Options{Memo: memo, ControllerName: r.opts.ControllerName, CredentialsDir: r.opts.CredentialsDir,
		LabelFilter: r.opts.LabelFilter, ConfigDiscoveryNamespace: r.opts.ConfigDiscoveryNamespace,
		ConfigDiscoveryPort: r.opts.ConfigDiscoveryPort, NoConfigDiscovery: r.opts.NoConfigDiscovery}
}

func gatewaysByName(in *render.Input) map[types.NamespacedName]*gwapiv1.Gateway {
	out := make(map[types.NamespacedName]*gwapiv1.Gateway, len(in.Gateways))
	for i := range in.Gateways {
		gw := &in.Gateways[i]
		out[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}] = gw
	}
	return out
}

// applyGateway applies the objects rendered for gw, none when one of their names is taken
// (foreignObjects), and returns the Gateway's status to write: render's, with the conflict
// or the objects not applied. The status is nil when the existing objects could not be read.
func (r *Reconciler) applyGateway(ctx context.Context, g *render.GatewayResult, gw *gwapiv1.Gateway) (status *gwapiv1.GatewayStatus, conflict bool, errs []error) {
	var objs []client.Object
	for _, o := range g.Objects() {
		objs = append(objs, o.(client.Object)) // the same method set
	}
	// Nothing is applied when one object is foreign: a Deployment whose ServiceAccount or
	// ConfigMap is someone else's would run with their permissions or their config.
	foreign, err := r.foreignObjects(ctx, objs, gw)
	if err != nil {
		return nil, false, []error{fmt.Errorf("gateway %s/%s: read existing objects: %w", g.Namespace, g.Name, err)}
	}
	status = &g.Status
	if len(foreign) > 0 {
		r.log.Info("objects named after the Gateway exist and are not the operator's; nothing applied",
			"gateway", g.Namespace+"/"+g.Name, "objects", foreign)
		status = withConflict(status, foreign, gw.Generation)
		conflict = true
		objs = nil
	}
	secretFailed := false
	var failed []string // "Kind name: error" of each object not applied
	for _, obj := range objs {
		if isWorkload(obj) && secretFailed {
			// Its pods would start without their credentials, or mount a
			// Secret that is not the Gateway's.
			errs = append(errs, fmt.Errorf("gateway %s/%s: %s %s not applied: its credentials Secret was not", g.Namespace, g.Name, kindOf(obj), obj.GetName()))
			failed = append(failed, fmt.Sprintf("%s %s: its credentials Secret was not applied", kindOf(obj), obj.GetName()))
			continue
		}
		if err := r.applyOwned(ctx, obj, gw); err != nil {
			errs = append(errs, fmt.Errorf("gateway %s/%s: apply %T %s: %w", g.Namespace, g.Name, obj, obj.GetName(), err))
			failed = append(failed, fmt.Sprintf("%s %s: %v", kindOf(obj), obj.GetName(), err))
			_, isSecret := obj.(*corev1.Secret)
			secretFailed = secretFailed || isSecret
		}
	}
	if len(failed) > 0 {
		status = withApplyFailed(status, failed, gw.Generation)
	}
	return status, conflict, errs
}

// isWorkload reports whether obj runs the dataplane pods: a Deployment or a DaemonSet.
func isWorkload(obj client.Object) bool {
	switch obj.(type) {
	case *appsv1.Deployment, *appsv1.DaemonSet:
		return true
	}
	return false
}

// publishConfigs hands the config of every rendered Gateway to Options.Configs. A Gateway that
// did not render keeps the config served before, as it keeps its ConfigMap; a Gateway no longer
// rendered (deleted, or no longer of a managed class) is dropped, which its watchers see as
// STUNner's zero config.
//
// With only, res holds some Gateways only (reconcileSlices): the others keep what was served.
func (r *Reconciler) publishConfigs(res *render.Result, only bool) {
	r.publishMu.Lock()
	defer r.publishMu.Unlock()
	configs := make(map[string][]byte, len(res.Gateways))
	private := make(map[string][]byte, len(res.Gateways))
	if only {
		maps.Copy(configs, r.published)
		maps.Copy(private, r.publishedPrivate)
	}
	// A Gateway whose document and credentials are what they were is not converted again: a
	// full render publishes every Gateway, most of them unchanged.
	memo := r.cdsMemo
	if !only || memo == nil {
		r.cdsMemo = make(map[string]cdsMemoEntry, len(res.Gateways))
	}
	for i := range res.Gateways {
		g := &res.Gateways[i]
		id := g.Namespace + "/" + g.Name
		var (
			c, p []byte
			err  error
		)
		key := cdsMemoFor(g)
		if e, ok := memo[id]; ok && key.doc != "" && e.doc == key.doc && e.password == key.password && e.secret == key.secret {
			c, p = e.public, e.private
		} else {
			c, p, err = g.CDSConfigs()
		}
		if err == nil && c != nil {
			key.public, key.private = c, p
			r.cdsMemo[id] = key
		}
		if err != nil {
			r.log.Error(err, "config discovery: cannot serve the rendered config", "gateway", id)
		}
		if c == nil || err != nil {
			if old, oldPrivate, ok := r.opts.Configs.Get(g.Namespace, g.Name); ok {
				configs[id], private[id] = old, oldPrivate
			}
			continue
		}
		configs[id], private[id] = c, p
	}
	r.opts.Configs.Update(configs, private)
	r.published, r.publishedPrivate = configs, private
}
