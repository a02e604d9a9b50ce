package controller

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// STUNner's operator labels every Deployment, DaemonSet, Service and ConfigMap it renders with
// stunnerOwnedBy=stunnerOwnedByValue.
const (
	stunnerOwnedBy      = "stunner.l7mp.io/owned-by"
	stunnerOwnedByValue = "stunner"
)

// renderedByStunner reports whether STUNner's operator rendered cur for gw: it carries STUNner's
// owned-by label and an owner reference (STUNner's are not controller references) to gw's UID.
// See createdFor for why this is safe to take over.
func renderedByStunner(cur client.Object, gw *gwapiv1.Gateway) bool {
	if cur.GetLabels()[stunnerOwnedBy] != stunnerOwnedByValue || gw.UID == "" {
		return false
	}
	for _, ref := range cur.GetOwnerReferences() {
		if ref.UID == gw.UID && ref.Kind == "Gateway" && isGatewayAPIVersion(ref.APIVersion) {
			return true
		}
	}
	return false
}

func isGatewayAPIVersion(gv string) bool {
	return gv == gwapiv1.GroupVersion.String() || gv == gwapiv1.GroupName+"/v1beta1"
}

// adoptStunner prepares cur, an object renderedByStunner for gw, for the forced apply of
// rendered. It returns replaced=true when it deleted cur, so the apply creates the object anew.
//
// In place is the rule: the fields STUNner's operator set (it writes with create and patch,
// operation Update) are handed to FieldOwner, as kubectl hands client-side-applied fields to
// server-side apply (csaupgrade). The apply then removes what Tern does not render (the
// stunnerd container, STUNner's data key, labels, annotations and ports) instead of merging
// it with Tern's, and the owner reference to gw, listed by UID, ends up as Tern's one
// controller reference. Fields other managers own (an autoscaler's replicas, a cloud
// controller's annotations) stay theirs. A Service keeps its clusterIP and node ports, which
// nobody renders and the API server keeps, so clients' addresses do not change.
//
// Replaced are only objects whose change the API server refuses: a ConfigMap or Secret
// marked immutable (STUNner's ConfigMap is; Tern's is rewritten on every configuration
// change), and a Deployment or DaemonSet whose spec.selector selects other labels than Tern's
// (spec.selector is immutable). STUNner's selector selects the same labels as Tern's, in
// another form (matchExpressions), and keepSelector keeps it, so its Deployment is updated in
// place: a rolling update that keeps STUNner's pods serving until ternd's are ready.
func (r *Reconciler) adoptStunner(ctx context.Context, cur, rendered client.Object, gw *gwapiv1.Gateway) (replaced bool, err error) {
	if why := mustReplace(cur, rendered); why != "" {
		r.log.Info("replacing an object STUNner's operator rendered: "+why, "gateway", gw.Namespace+"/"+gw.Name,
			"object", r.describe(cur))
		r.events.Eventf(gw, cur, corev1.EventTypeNormal, ReasonReplacedStunnerObject, "Replace",
			"deleting %s, rendered by STUNner's operator, to create it anew: %s", r.describe(cur), why)
		// Background, not Orphan: orphaned pods that the new selector does not select would
		// run on, unmanaged.
		err := r.client.Delete(ctx, cur, client.Preconditions{UID: ptr(cur.GetUID())},
			client.PropagationPolicy(metav1.DeletePropagationBackground))
		if client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("replace %s (%s): %w", r.describe(cur), why, err)
		}
		return true, nil
	}
	managers := sets.New[string]()
	for _, e := range csaupgrade.FindFieldsOwners(cur.GetManagedFields(), metav1.ManagedFieldsOperationUpdate, stunnerLabelField) {
		if e.Subresource == "" {
			managers.Insert(e.Manager)
		}
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(cur, managers, FieldOwner)
	if err != nil || patch == nil {
		return false, err
	}
	r.log.Info("taking over an object STUNner's operator rendered", "gateway", gw.Namespace+"/"+gw.Name,
		"object", r.describe(cur), "fieldManagers", sets.List(managers))
	if err := r.client.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return false, err
	}
	r.events.Eventf(gw, cur, corev1.EventTypeNormal, ReasonTookOverStunnerObject, "Adopt",
		"%s, rendered by STUNner's operator, is updated in place to the operator's", r.describe(cur))
	return false, nil
}

// Reasons of the events about objects STUNner's operator rendered.
const (
	ReasonTookOverStunnerObject = "TookOverFromSTUNner"
	ReasonReplacedStunnerObject = "ReplacedFromSTUNner"
)

// stunnerLabelField is the field path of STUNner's owned-by label: the field managers that
// own it are STUNner's operator.
var stunnerLabelField = fieldpath.NewSet(fieldpath.MakePathOrDie("metadata", "labels", stunnerOwnedBy))

// mustReplace says why cur cannot be changed into rendered in place, or "" if it can.
func mustReplace(cur, rendered client.Object) string {
	switch c := cur.(type) {
	case *corev1.ConfigMap:
		if c.Immutable != nil && *c.Immutable {
			return "the ConfigMap is immutable"
		}
	case *corev1.Secret:
		if c.Immutable != nil && *c.Immutable {
			return "the Secret is immutable"
		}
	}
	old, rend := workloadSelector(cur), workloadSelector(rendered)
	if old != nil && rend != nil && !sameSelection(old, rend) {
		return fmt.Sprintf("its spec.selector %s, which cannot be changed, selects other pods than %s",
			metav1.FormatLabelSelector(old), metav1.FormatLabelSelector(rend))
	}
	return ""
}

// workloadSelector returns the spec.selector of a Deployment or DaemonSet, nil for other
// objects.
func workloadSelector(obj client.Object) *metav1.LabelSelector {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Selector
	case *appsv1.DaemonSet:
		return o.Spec.Selector
	}
	return nil
}

// keepSelector sets the spec.selector of u, the apply object of a Deployment or DaemonSet, to
// cur's when both select the same labels: spec.selector is immutable and atomic, so stating
// the same selection in another form (STUNner's matchExpressions for Tern's matchLabels)
// would make the API server refuse the apply.
func keepSelector(u *unstructured.Unstructured, cur, rendered client.Object) error {
	old, rend := workloadSelector(cur), workloadSelector(rendered)
	if old == nil || rend == nil || !sameSelection(old, rend) {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	if err != nil {
		return err
	}
	return unstructured.SetNestedField(u.Object, m, "spec", "selector")
}

// sameSelection reports whether a and b select exactly the same label sets, where both are
// equalities only (matchLabels, or In with one value): the forms STUNner and Tern write.
func sameSelection(a, b *metav1.LabelSelector) bool {
	la, oka := equalities(a)
	lb, okb := equalities(b)
	return oka && okb && maps.Equal(la, lb)
}

// equalities returns the labels sel requires, when it requires nothing but label values.
func equalities(sel *metav1.LabelSelector) (map[string]string, bool) {
	out := maps.Clone(sel.MatchLabels)
	if out == nil {
		out = map[string]string{}
	}
	for _, req := range sel.MatchExpressions {
		if req.Operator != metav1.LabelSelectorOpIn || len(req.Values) != 1 {
			return nil, false
		}
		if v, ok := out[req.Key]; ok && v != req.Values[0] {
			return nil, false // selects nothing
		}
		out[req.Key] = req.Values[0]
	}
	return out, len(out) > 0
}
