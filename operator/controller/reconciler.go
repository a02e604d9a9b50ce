package controller

import (
	"context"
	"errors"
	"fmt"
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

// renderKey is the one work-queue key: every event asks for the same full render.
var renderKey = ctrl.Request{NamespacedName: types.NamespacedName{Name: "render"}}

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
}

// Reconcile lists every input object from the caches, renders, and writes the rendered
// objects and the status. It ignores the request: there is only renderKey. A failure to
// write one Gateway's objects does not stop the others; the errors are returned together so
// the work queue retries with backoff. A Gateway whose objects' names are taken by objects
// created neither by the operator nor by STUNner's operator for it gets none of them applied and Programmed=False with ReasonConflict
// (foreignObjects); the render is repeated every conflictRetry until the names are free.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	gen := r.loop.startRender()
	in, err := r.collect(ctx)
	if err != nil {
		r.loop.updated(gen, 0, err)
		return ctrl.Result{}, fmt.Errorf("list inputs: %w", err)
	}
	r.applied.rotate()
	r.routes.rotate()
	res := render.Render(in, render.Options{Memo: &r.memo, ControllerName: r.opts.ControllerName, CredentialsDir: r.opts.CredentialsDir,
		LabelFilter: r.opts.LabelFilter, ConfigDiscoveryNamespace: r.opts.ConfigDiscoveryNamespace,
		ConfigDiscoveryPort: r.opts.ConfigDiscoveryPort, NoConfigDiscovery: r.opts.NoConfigDiscovery})
	r.loop.rendered(time.Since(start))
	writeStart := time.Now()
	for _, p := range res.Problems {
		r.log.V(1).Info("render problem", "object", p.Object.String(), "field", p.Field, "severity", p.Severity, "message", p.Message)
	}

	if r.opts.Configs != nil {
		r.publishConfigs(res)
	}

	gateways := map[types.NamespacedName]*gwapiv1.Gateway{}
	for i := range in.Gateways {
		gw := &in.Gateways[i]
		gateways[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}] = gw
	}
	var errs []error
	var retry time.Duration // set while a Gateway has a conflict or asks for offload
	for i := range res.Gateways {
		g := &res.Gateways[i]
		gw := gateways[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}]
		if gw == nil { // render only reports on Gateways of its input; never expected
			errs = append(errs, fmt.Errorf("rendered Gateway %s/%s is not in the input", g.Namespace, g.Name))
			continue
		}
		var objs []client.Object
		for _, o := range g.Objects() {
			objs = append(objs, o.(client.Object)) // the same method set
		}
		// Nothing is applied when one object is foreign: a Deployment whose ServiceAccount or
		// ConfigMap is someone else's would run with their permissions or their config.
		foreign, err := r.foreignObjects(ctx, objs, gw)
		if err != nil {
			errs = append(errs, fmt.Errorf("gateway %s/%s: read existing objects: %w", g.Namespace, g.Name, err))
			continue
		}
		status := &g.Status
		if len(foreign) > 0 {
			r.log.Info("objects named after the Gateway exist and are not the operator's; nothing applied",
				"gateway", g.Namespace+"/"+g.Name, "objects", foreign)
			status = withConflict(status, foreign, gw.Generation)
			retry = conflictRetry
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
func (r *Reconciler) publishConfigs(res *render.Result) {
	configs := make(map[string][]byte, len(res.Gateways))
	private := make(map[string][]byte, len(res.Gateways))
	for i := range res.Gateways {
		g := &res.Gateways[i]
		id := g.Namespace + "/" + g.Name
		c, err := g.CDSConfig()
		var p []byte
		if err == nil {
			p, err = g.CDSConfigWithCredentials()
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
}
