package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// CacheOptions returns the manager cache options the controller expects: ConfigMaps,
// Deployments, DaemonSets, ServiceAccounts, Roles, RoleBindings and Pods are cached only when the operator
// manages them, since it reads no others and a cluster has many.
func CacheOptions() cache.Options {
	sel := labels.SelectorFromSet(managedBy)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:      {Label: sel},
		&appsv1.Deployment{}:     {Label: sel},
		&appsv1.DaemonSet{}:      {Label: sel},
		&corev1.ServiceAccount{}: {Label: sel},
		&rbacv1.Role{}:           {Label: sel},
		&rbacv1.RoleBinding{}:    {Label: sel},
		// The dataplane pods: the config discovery service checks its clients against
		// their IPs (DataplanePods), and OffloadActive asks them at their health port.
		&corev1.Pod{}: {Label: sel},
	}}
}

// Setup adds the controller to mgr, whose scheme must include NewScheme's types and whose
// cache should be built with CacheOptions. It fails if the cluster lacks the Gateway API or
// stunner.l7mp.io CRDs; the Gateway API's UDPRoute is optional and watched in the version the
// cluster serves. It returns the Reconciler, which tests may call directly.
func Setup(mgr manager.Manager, opts Options) (*Reconciler, error) {
	opts = opts.withDefaults()
	if err := checkCRDs(mgr.GetRESTMapper()); err != nil {
		return nil, err
	}
	rv, err := discoverRouteVersion(mgr.GetRESTMapper())
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		client:        mgr.GetClient(),
		apiReader:     mgr.GetAPIReader(),
		opts:          opts,
		gatewayRoutes: rv,
		log:           mgr.GetLogger().WithName("tern-operator"),
		loop:          &loopState{},
		events:        mgr.GetEventRecorder(FieldOwner),
		offload:       newOffloadReader(opts.OffloadReportPort),
	}
	if rv == nil {
		r.log.Info("the cluster serves no gateway.networking.k8s.io UDPRoute; only stunner.l7mp.io UDPRoutes are handled")
	} else {
		r.log.Info("watching gateway.networking.k8s.io UDPRoutes", "version", rv.version)
	}

	all := r.enqueue()
	// Status writes, the operator's own included, do not change what renders; skipping them
	// keeps each status write from causing another full render.
	specOnly := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))

	b := ctrl.NewControllerManagedBy(mgr).
		Named("tern-operator").
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Watches(&gwapiv1.GatewayClass{}, all, specOnly).
		Watches(&gwapiv1.Gateway{}, all, specOnly).
		Watches(&stnrv1.GatewayConfig{}, all, specOnly).
		Watches(&stnrv1.UDPRoute{}, all, specOnly).
		Watches(&stnrv1.StaticService{}, all, specOnly).
		Watches(&stnrv1.Dataplane{}, all, specOnly).
		// A Service's status carries its load-balancer addresses, the Gateway's addresses.
		Watches(&corev1.Service{}, all).
		Watches(&discoveryv1.EndpointSlice{}, r.enqueueSlices()).
		Watches(&corev1.Secret{}, all).
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodeAddressesChanged())).
		// The operator's own objects: recreate them when deleted, re-apply when edited.
		Watches(&corev1.ConfigMap{}, all, builder.WithPredicates(r.own.notOwnUpdate())).
		Watches(&appsv1.Deployment{}, all, specOnly).
		Watches(&appsv1.DaemonSet{}, all, specOnly).
		Watches(&corev1.ServiceAccount{}, all, specOnly).
		Watches(&rbacv1.Role{}, all).
		Watches(&rbacv1.RoleBinding{}, all).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(podReadinessChanged()))
	if rv != nil {
		b = b.Watches(rv.object(), all, specOnly)
	}
	if err := b.Complete(r); err != nil {
		return nil, err
	}
	if err := mgr.Add(heartbeat{r.loop}); err != nil {
		return nil, err
	}
	return r, nil
}

// enqueue returns the event handler of every watch but EndpointSlices' (enqueueSlices): each
// event asks for the full render (renderKey), counted in reconcile_events_total. With Options.ThrottleTimeout the render
// starts that long after the first event, and the events until then join it, as STUNner's
// --throttle-timeout rate-limits its renders; without, at once (events that arrive while a
// render is queued join it anyway, as the work queue holds renderKey once).
func (r *Reconciler) enqueue() handler.EventHandler {
	add := r.enqueueRender
	return handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		UpdateFunc: func(_ context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
	}
}

// enqueueRender asks for the full render, counted in reconcile_events_total: at once, or
// Options.ThrottleTimeout later.
func (r *Reconciler) enqueueRender(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.loop.event()
	if r.opts.ThrottleTimeout > 0 {
		q.AddAfter(renderKey, r.opts.ThrottleTimeout)
		return
	}
	q.Add(renderKey)
}

// heartbeat runs loopState.heartbeat on every replica, leader or not: each one's loop gauges
// say whether it is alive.
type heartbeat struct{ s *loopState }

func (h heartbeat) Start(ctx context.Context) error { return h.s.heartbeat(ctx) }

// NeedLeaderElection is false: the gauges are per replica.
func (heartbeat) NeedLeaderElection() bool { return false }

// nodeAddressesChanged passes Node events that can change a rendering (creation, deletion,
// addresses, labels, pod CIDRs, which tell a dual-stack cluster and are set after a Node is
// created) and drops the frequent status updates that change none of them.
func nodeAddressesChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return !equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses) ||
			!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
			!equality.Semantic.DeepEqual(o.Spec.PodCIDRs, n.Spec.PodCIDRs)
	}}
}

// checkCRDs fails with a message that says what to install when a required kind is not served.
func checkCRDs(mapper meta.RESTMapper) error {
	for _, gvk := range []schema.GroupVersionKind{
		schema.GroupVersionKind{Group: gwapiv1.GroupName, Version: "v1", Kind: "GatewayClass"},
		schema.GroupVersionKind{Group: gwapiv1.GroupName, Version: "v1", Kind: "Gateway"},
		stnrv1.GroupVersion.WithKind("GatewayConfig"),
		stnrv1.GroupVersion.WithKind("UDPRoute"),
		stnrv1.GroupVersion.WithKind("StaticService"),
		stnrv1.GroupVersion.WithKind("Dataplane"),
	} {
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return fmt.Errorf("the cluster does not serve %s (install the CRDs in deploy/crds): %w", gvk, err)
		}
	}
	return nil
}
