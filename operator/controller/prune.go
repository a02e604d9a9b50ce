package controller

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/operator/render"
)

// prune deletes the objects the operator rendered for Gateways it no longer manages: the
// Gateway is gone, or moved to a GatewayClass of another controller. Deleting a Gateway
// garbage-collects its objects through the owner reference anyway; pruning covers the class
// change, and clusters (like envtest) without a garbage collector.
//
// Objects of a Gateway that is still managed are kept even when render produced none this
// time (its GatewayConfig went invalid, the Dataplane is missing): a broken edit should stop
// configuration changes, not take running TURN servers away. The exceptions are objects that
// a Gateway rendered with a dataplane workload no longer has, because its Dataplane changed
// what they run: the workload of the other kind (when render returns a DaemonSet for a
// Gateway, its Deployment is deleted, and the other way round: the Dataplane's
// dataplaneResource changed, as STUNner's operator does), and the Role and RoleBinding once
// its pods no longer read the ConfigMap through the API (they take their config from the
// config discovery service, the default).
func (r *Reconciler) prune(ctx context.Context, in *render.Input, res *render.Result) error {
	names := map[types.NamespacedName]*render.GatewayResult{}
	for i, g := range res.Gateways {
		names[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = &res.Gateways[i]
	}
	managed := map[types.UID]bool{}
	// stale holds, per managed Gateway that has a workload rendered, the kinds of object it
	// must not have.
	stale := map[types.UID]map[string]bool{}
	for _, gw := range in.Gateways {
		g := names[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}]
		if g == nil {
			continue
		}
		managed[gw.UID] = true
		if g.Deployment == nil && g.DaemonSet == nil {
			continue
		}
		kinds := map[string]bool{}
		switch {
		case g.Deployment != nil:
			kinds["DaemonSet"] = true
		case g.DaemonSet != nil:
			kinds["Deployment"] = true
		}
		if g.Role == nil {
			kinds["Role"] = true
		}
		if g.RoleBinding == nil {
			kinds["RoleBinding"] = true
		}
		stale[gw.UID] = kinds
	}

	var errs []error
	sel := client.MatchingLabels(managedBy)
	for _, l := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceList{}, &appsv1.DeploymentList{},
		&appsv1.DaemonSetList{}, &corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}} {
		if err := r.client.List(ctx, l, sel); err != nil {
			errs = append(errs, fmt.Errorf("prune: list %T: %w", l, err))
			continue
		}
		for _, obj := range listObjects(l) {
			owner := gatewayOwner(obj)
			if owner == nil {
				continue
			}
			if managed[owner.UID] {
				kind := kindOf(obj)
				if !stale[owner.UID][kind] {
					continue
				}
				why := "whose Dataplane now asks for another kind"
				if kind == "Role" || kind == "RoleBinding" {
					why = "whose pods no longer read their ConfigMap through the API (config from CDS)"
				}
				r.log.Info("deleting the "+kind+" of a Gateway "+why,
					"namespace", obj.GetNamespace(), "name", obj.GetName(), "gateway", owner.Name)
			} else {
				r.log.Info("deleting object of a Gateway no longer managed", "kind", fmt.Sprintf("%T", obj),
					"namespace", obj.GetNamespace(), "name", obj.GetName(), "gateway", owner.Name)
			}
			if err := r.client.Delete(ctx, obj, client.Preconditions{UID: ptr(obj.GetUID())}); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("prune %s/%s: %w", obj.GetNamespace(), obj.GetName(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// gatewayOwner returns the controlling owner reference of obj if it is a Gateway.
func gatewayOwner(obj client.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "Gateway" {
		return nil
	}
	if gv := ref.APIVersion; gv != gwapiv1.GroupVersion.String() && gv != gwapiv1.GroupName+"/v1beta1" {
		return nil
	}
	return ref
}

// listObjects returns the items of the lists prune reads as client.Objects.
func listObjects(l client.ObjectList) []client.Object {
	var out []client.Object
	switch l := l.(type) {
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.SecretList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.DeploymentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.DaemonSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceAccountList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *rbacv1.RoleList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *rbacv1.RoleBindingList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
