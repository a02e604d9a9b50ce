package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ReasonConflict is the reason of a Gateway's Programmed=False condition when an object the
// operator would write for it (named after the Gateway) already exists and was not created by
// the operator for that Gateway. The Gateway API lets implementations add reasons of their own.
const ReasonConflict = "Conflict"

// conflictRetry is how soon the Gateways are rendered again while one has a conflict. The
// foreign objects carry no managed-by label, so the cache does not hold them (CacheOptions)
// and their deletion or renaming raises no event: only a new look finds the name free.
const conflictRetry = 10 * time.Second

// foreignObjects returns "Kind namespace/name" for each object of objs that already exists in
// the cluster and that the operator did not create for gw (createdFor). Such an object must
// not be applied: a forced server-side apply would take it over, so anyone allowed to create a
// Gateway could rewrite, say, a ConfigMap or ServiceAccount of the same name that belongs to
// someone else in the namespace.
//
// The cache answers for objects the operator already controls, so a steady-state reconcile
// makes no API call here. Anything else (not cached, which is every object without the
// managed-by label, or cached but not controlled by gw) is read from the API server, so a
// recent creation or deletion is not missed.
func (r *Reconciler) foreignObjects(ctx context.Context, objs []client.Object, gw *gwapiv1.Gateway) ([]string, error) {
	var out []string
	for _, obj := range objs {
		key := client.ObjectKeyFromObject(obj)
		cur := obj.DeepCopyObject().(client.Object)
		err := r.client.Get(ctx, key, cur)
		if err == nil && metav1.IsControlledBy(cur, gw) {
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		switch err := r.apiReader.Get(ctx, key, cur); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		}
		if !createdFor(cur, gw) {
			out = append(out, r.describe(obj))
		}
	}
	return out, nil
}

// createdFor reports whether the operator created cur for gw, or may take it over: gw controls
// it, or it carries the managed-by label and is controlled by an earlier Gateway of the same
// name (deleted and created again), or STUNner's operator rendered it for gw
// (renderedByStunner). The second kind is left over where no garbage collector has run yet;
// prune would delete it, and adopting it instead saves the dataplane a restart. A name alone,
// or the label alone, is not enough: both can be set by anyone who can create the object.
//
// The third kind carries STUNner's owned-by label and a plain owner reference to gw's UID, so
// that a switch from STUNner keeps its Service (and address) and rolls its Deployment over
// instead of stopping at a conflict. The UID is what makes this safe: the API server assigns
// it when gw is created, and it names gw alone, never an earlier or later Gateway of the name.
// An object carries a reference to it only because its author put it there for gw, after gw
// was created; nobody's unrelated object has it by chance or by a reused name, so taking the
// object over takes nothing from someone who did not mean it for gw. The label keeps objects
// that merely depend on gw (a ConfigMap someone owns by it, to have it garbage-collected with
// gw) from being taken.
func createdFor(cur client.Object, gw *gwapiv1.Gateway) bool {
	if metav1.IsControlledBy(cur, gw) || renderedByStunner(cur, gw) {
		return true
	}
	owner := gatewayOwner(cur)
	return owner != nil && owner.Name == gw.Name && cur.GetNamespace() == gw.Namespace &&
		labels.SelectorFromSet(managedBy).Matches(labels.Set(cur.GetLabels()))
}

// describe names obj as "Kind namespace/name" for a condition message.
func (r *Reconciler) describe(obj client.Object) string {
	kind := fmt.Sprintf("%T", obj)
	if gvk, err := apiutil.GVKForObject(obj, r.client.Scheme()); err == nil {
		kind = gvk.Kind
	}
	return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// ReasonApplyFailed is the reason of a Gateway's Programmed=False condition when an object
// rendered for it could not be written (the API server refused it: a quota, an admission
// webhook, a field that cannot change); the reconcile is retried with backoff.
const ReasonApplyFailed = "ApplyFailed"

// withApplyFailed returns a copy of st whose Programmed condition is False with
// ReasonApplyFailed, naming each object not applied and why: render's Programmed=True only
// says what the operator meant to write, and a Gateway whose Deployment was refused serves
// nothing.
func withApplyFailed(st *gwapiv1.GatewayStatus, failed []string, generation int64) *gwapiv1.GatewayStatus {
	out := st.DeepCopy()
	msg := "not applied: " + strings.Join(failed, "; ")
	if len(msg) > maxConditionMessage {
		msg = msg[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&out.Conditions, metav1.Condition{
		Type:               string(gwapiv1.GatewayConditionProgrammed),
		Status:             metav1.ConditionFalse,
		Reason:             ReasonApplyFailed,
		Message:            msg,
		ObservedGeneration: generation,
	})
	return out
}

// withConflict returns a copy of st whose Programmed condition is False with ReasonConflict,
// naming the foreign objects, so `kubectl get gateway` and `kubectl wait` show why nothing
// was applied. Accepted and the listeners' conditions stay as render computed them.
func withConflict(st *gwapiv1.GatewayStatus, foreign []string, generation int64) *gwapiv1.GatewayStatus {
	out := st.DeepCopy()
	msg := fmt.Sprintf("nothing applied for this Gateway: %s already exist(s) and was not created by %s for it; "+
		"delete or rename it, or rename the Gateway", strings.Join(foreign, ", "), FieldOwner)
	if len(msg) > maxConditionMessage {
		msg = msg[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&out.Conditions, metav1.Condition{
		Type:               string(gwapiv1.GatewayConditionProgrammed),
		Status:             metav1.ConditionFalse,
		Reason:             ReasonConflict,
		Message:            msg,
		ObservedGeneration: generation,
	})
	return out
}
