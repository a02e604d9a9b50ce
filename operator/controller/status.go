package controller

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

// Status is written with merge patches computed against the cached object and only when it
// differs, so a reconcile that changes nothing writes nothing and triggers no new event.

// writeGatewayStatus sets gw's status to want, keeping the transition time of conditions
// whose status did not change.
func (r *Reconciler) writeGatewayStatus(ctx context.Context, gw *gwapiv1.Gateway, want *gwapiv1.GatewayStatus) error {
	next := gw.DeepCopy()
	now := metav1.Now()
	next.Status.Addresses = want.Addresses
	next.Status.Conditions = carryTransitions(gw.Status.Conditions, want.Conditions, now)
	next.Status.Listeners = make([]gwapiv1.ListenerStatus, len(want.Listeners))
	for i, l := range want.Listeners {
		l = *l.DeepCopy()
		var old []metav1.Condition
		for _, o := range gw.Status.Listeners {
			if o.Name == l.Name {
				old = o.Conditions
			}
		}
		l.Conditions = carryTransitions(old, l.Conditions, now)
		next.Status.Listeners[i] = l
	}
	if equality.Semantic.DeepEqual(gw.Status, next.Status) {
		countOp("status", gw, opSuppressed)
		return nil
	}
	return client.IgnoreNotFound(r.patchStatus(ctx, next, gw))
}

// writeClassStatuses writes the conditions render computed for each managed GatewayClass.
func (r *Reconciler) writeClassStatuses(ctx context.Context, classes []gwapiv1.GatewayClass, results []render.GatewayClassResult) error {
	var errs []error
	for _, res := range results {
		for i := range classes {
			gc := &classes[i]
			if gc.Name != res.Name {
				continue
			}
			next := gc.DeepCopy()
			next.Status.Conditions = carryTransitions(gc.Status.Conditions, res.Conditions, metav1.Now())
			if equality.Semantic.DeepEqual(gc.Status, next.Status) {
				countOp("status", gc, opSuppressed)
				continue
			}
			if err := r.patchStatus(ctx, next, gc); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("gatewayclass %s: status: %w", gc.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// writeRouteStatuses writes, on every route of both groups, the parent statuses render
// computed for this controller, keeping other controllers' entries. Routes render did not
// report on (they name no managed Gateway any more) lose this controller's old entries.
func (r *Reconciler) writeRouteStatuses(ctx context.Context, in *render.Input, res *render.Result) error {
	ctl := gwapiv1.GatewayController(r.opts.ControllerName)
	// render's route results by route, once: looking each route up in res.Routes would cost
	// a pass over a thousand routes for each of a thousand routes.
	type routeID struct{ group, ns, name string }
	rendered := make(map[routeID][]gwapiv1.RouteParentStatus, len(res.Routes))
	for i := range res.Routes {
		rr := &res.Routes[i]
		id := routeID{rr.Group, rr.Namespace, rr.Name}
		if _, dup := rendered[id]; !dup { // the first, as res.Route returns
			rendered[id] = rr.Parents
		}
	}
	ours := func(group, ns, name string) []gwapiv1.RouteParentStatus {
		return rendered[routeID{group, ns, name}]
	}
	// upToDate reports whether the route's status holds ours: from r.routes when the route
	// is unchanged since it was found so with the same ours, else by comparing want.
	upToDate := func(group string, meta metav1.Object, cur, ours []gwapiv1.RouteParentStatus) (want []gwapiv1.RouteParentStatus, ok bool) {
		name := types.NamespacedName{Namespace: meta.GetNamespace(), Name: meta.GetName()}
		digest, digested := parentsDigest(ours)
		if digested && r.routes.upToDate(group, name, meta.GetResourceVersion(), digest) {
			return nil, true
		}
		want = mergeParents(cur, ours, ctl)
		if !equality.Semantic.DeepEqual(cur, want) {
			return want, false
		}
		if digested {
			r.routes.remember(group, name, meta.GetResourceVersion(), digest)
		}
		return nil, true
	}
	var errs []error
	for i := range in.UDPRoutes {
		rt := &in.UDPRoutes[i]
		want, ok := upToDate(stnrv1.GroupName, rt, rt.Status.Parents, ours(stnrv1.GroupName, rt.Namespace, rt.Name))
		if ok {
			countOp("status", rt, opSuppressed)
			continue
		}
		next := rt.DeepCopy()
		next.Status.Parents = want
		if err := r.patchStatus(ctx, next, rt); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("udproute.%s %s/%s: status: %w", stnrv1.GroupName, rt.Namespace, rt.Name, err))
		}
	}
	for i := range in.GatewayUDPRoutes {
		rt := &in.GatewayUDPRoutes[i]
		want, ok := upToDate(gwapiv1.GroupName, rt, rt.Status.Parents, ours(gwapiv1.GroupName, rt.Namespace, rt.Name))
		if ok {
			countOp("status", rt, opSuppressed)
			continue
		}
		countOp("status", rt, opAttempt)
		if _, err := r.gatewayRoutes.setParents(ctx, r.client, rt.Namespace, rt.Name, want); err != nil {
			countOp("status", rt, opError)
			errs = append(errs, fmt.Errorf("udproute.%s %s/%s: status: %w", gwapiv1.GroupName, rt.Namespace, rt.Name, err))
		} else {
			countOp("status", rt, opUpdated)
		}
	}
	return errors.Join(errs...)
}

// patchStatus writes next's status as a merge patch against orig, counted in
// resource_operations_total (scope "status": an attempt, then updated or error; an object
// that is gone is not an error).
func (r *Reconciler) patchStatus(ctx context.Context, next, orig client.Object) error {
	countOp("status", next, opAttempt)
	err := r.client.Status().Patch(ctx, next, client.MergeFrom(orig))
	if client.IgnoreNotFound(err) != nil {
		countOp("status", next, opError)
	} else {
		countOp("status", next, opUpdated)
	}
	return err
}

// mergeParents returns cur's entries of other controllers followed by ours (each stamped
// with ctl), carrying condition transition times over from cur's entry for the same parent.
// The result is never nil: the CRDs require status.parents, so an emptied list is written
// as [] (which compares equal to a missing one, so it is not written again).
func mergeParents(cur, ours []gwapiv1.RouteParentStatus, ctl gwapiv1.GatewayController) []gwapiv1.RouteParentStatus {
	out := []gwapiv1.RouteParentStatus{}
	for _, p := range cur {
		if p.ControllerName != ctl {
			out = append(out, p)
		}
	}
	now := metav1.Now()
	for _, p := range ours {
		p = *p.DeepCopy()
		p.ControllerName = ctl
		var old []metav1.Condition
		for _, o := range cur {
			if o.ControllerName == ctl && equality.Semantic.DeepEqual(o.ParentRef, p.ParentRef) {
				old = o.Conditions
			}
		}
		p.Conditions = carryTransitions(old, p.Conditions, now)
		out = append(out, p)
	}
	return out
}

// carryTransitions returns want with each condition's LastTransitionTime taken from the
// condition of the same type in old when its status is unchanged, and now otherwise: the
// Gateway API (and kubectl wait) read the time as when the status last flipped.
func carryTransitions(old, want []metav1.Condition, now metav1.Time) []metav1.Condition {
	if want == nil {
		return nil
	}
	out := make([]metav1.Condition, len(want))
	for i, c := range want {
		c.LastTransitionTime = now
		for _, o := range old {
			if o.Type == c.Type && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		out[i] = c
	}
	return out
}
