package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/operator/render"
)

// FieldOwner is the server-side apply field manager of everything the operator writes.
const FieldOwner = "tern-operator"

// managedBy selects the objects render labels as the operator's (render.LabelManagedBy), so
// prune finds them and the cache holds only the operator's own ConfigMaps, Deployments and
// RBAC objects, not every one in the cluster.
var managedBy = map[string]string{render.LabelManagedBy: render.LabelManagedByValue}

// HashAnnotation holds a digest of what the operator last applied to an object, so unchanged
// objects are not sent again.
const HashAnnotation = "operator.tern-gw.io/rendered-hash"

// applyOwned writes obj, an object render returned for gw, with server-side apply. obj is not
// modified: render has named, labelled and owned it, and an object that is not in gw's
// namespace, labelled managedBy and controlled by gw is refused, since prune and the cache
// would then never find it again.
//
// Server-side apply rather than update: the operator states only the fields it renders, so
// fields other managers set (a LoadBalancer controller's annotations, defaulted fields) are
// left alone, and an unchanged object is a no-op on the server, so reconciles cause no events.
// An object whose HashAnnotation shows it was applied from the same rendering is skipped, so
// a hand edit of a Deployment or Service is undone at the next change of what renders, and a
// deleted object or an edited ConfigMap at once. A Deployment's replicas are left out once
// someone else (an autoscaler, kubectl scale) owns them, as the Dataplane reference asks.
//
// An object STUNner's operator rendered for gw is taken over (adoptStunner), and an existing
// Deployment's or DaemonSet's selector is kept when it selects the same pods (keepSelector).
//
// Each call is counted in resource_operations_total (scope "spec"): an attempt, then
// suppressed, created (also for an object of STUNner's replaced), updated, none or error.
func (r *Reconciler) applyOwned(ctx context.Context, obj client.Object, gw *gwapiv1.Gateway) error {
	countOp("spec", obj, opAttempt)
	op, err := r.apply(ctx, obj, gw)
	if err != nil {
		op = opError
		r.applied.forget(obj)
	}
	countOp("spec", obj, op)
	return err
}

// apply is applyOwned without the counting; it returns the operation it did. An object
// rendered as when it was last applied takes its hash from r.applied (appliedMemo) and is
// suppressed when the cached object still carries that hash, is controlled by gw and holds
// the rendered data; anything else takes the full way.
func (r *Reconciler) apply(ctx context.Context, obj client.Object, gw *gwapiv1.Gateway) (string, error) {
	if err := checkApplicable(obj, gw); err != nil {
		return "", err
	}
	digest, digested := renderedDigest(obj)
	if digested {
		if hash, ok := r.applied.hash(obj, digest); ok {
			cur := obj.DeepCopyObject().(client.Object)
			if err := r.client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil &&
				cur.GetAnnotations()[HashAnnotation] == hash && metav1.IsControlledBy(cur, gw) && sameConfig(cur, obj) {
				return opSuppressed, nil // as the full way below would find
			}
		}
	}
	op, hash, err := r.applyFull(ctx, obj, gw)
	if err == nil && digested {
		r.applied.remember(obj, digest, hash)
	}
	return op, err
}

// applyFull is apply without the memo; it also returns the hash the object is applied with.
func (r *Reconciler) applyFull(ctx context.Context, obj client.Object, gw *gwapiv1.Gateway) (op, hash string, err error) {
	u, err := r.toApplyObject(obj)
	if err != nil {
		return "", "", err
	}
	hash, err = contentHash(u)
	if err != nil {
		return "", "", err
	}
	u.SetAnnotations(withAnnotation(u.GetAnnotations(), HashAnnotation, hash))

	cur := obj.DeepCopyObject().(client.Object)
	err = r.client.Get(ctx, client.ObjectKeyFromObject(obj), cur)
	if apierrors.IsNotFound(err) || err == nil && !metav1.IsControlledBy(cur, gw) {
		// Not the operator's yet (an object STUNner's operator rendered, say): read it past
		// the cache, which holds most kinds only when they carry the managed-by label.
		err = r.apiReader.Get(ctx, client.ObjectKeyFromObject(obj), cur)
	}
	exists := err == nil
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", "", err
	case isSecret(cur) && !metav1.IsControlledBy(cur, gw):
		// A Secret is never taken over: one of that name that the Gateway
		// does not control is the user's, and may hold anything.
		return "", "", fmt.Errorf("the Secret %s/%s exists and is not controlled by the Gateway; the operator will not overwrite it: rename or delete it",
			cur.GetNamespace(), cur.GetName())
	case cur.GetAnnotations()[HashAnnotation] == hash && metav1.IsControlledBy(cur, gw) && sameConfig(cur, obj):
		return opSuppressed, hash, nil // applied before, and nothing the operator renders has changed since
	default:
		if !metav1.IsControlledBy(cur, gw) && renderedByStunner(cur, gw) {
			replaced, err := r.adoptStunner(ctx, cur, obj, gw)
			if err != nil {
				return "", "", fmt.Errorf("take over from STUNner: %w", err)
			}
			exists = !replaced
		}
		if d, ok := cur.(*appsv1.Deployment); ok && exists {
			// Who owns replicas is read from the API server: the cache may not have seen an
			// autoscaler's scale yet, and a forced apply with replicas would undo it.
			if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return "", "", err
			}
			if replicasOwnedByOthers(d) {
				unstructured.RemoveNestedField(u.Object, "spec", "replicas")
			}
		}
	}
	if exists {
		if err := keepSelector(u, cur, obj); err != nil {
			return "", "", err
		}
	}
	before := cur.GetResourceVersion()
	r.own.applying(obj, hash) // before the apply: its watch event may come before its answer
	if err := r.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return "", "", err
	}
	switch {
	case !exists: // new, or STUNner's replaced
		return opCreated, hash, nil
	case u.GetResourceVersion() != before:
		return opUpdated, hash, nil
	}
	return opNone, hash, nil
}

// checkApplicable returns an error unless obj is in gw's namespace, labelled managedBy and
// controlled by gw, as render promises for every object it returns.
func checkApplicable(obj client.Object, gw *gwapiv1.Gateway) error {
	switch {
	case obj.GetNamespace() != gw.Namespace:
		return fmt.Errorf("rendered in namespace %q, not the Gateway's", obj.GetNamespace())
	case !labels.SelectorFromSet(managedBy).Matches(labels.Set(obj.GetLabels())):
		return fmt.Errorf("rendered without the label %s=%s", render.LabelManagedBy, render.LabelManagedByValue)
	case !metav1.IsControlledBy(obj, gw):
		return errors.New("rendered without the Gateway as its controlling owner")
	}
	return nil
}

// sameConfig reports whether cur holds the data of rendered when both are ConfigMaps or both
// Secrets (and is true otherwise). The hash alone would not notice a hand edit of the
// dataplane config or its credentials, which the running dataplanes would pick up; they are
// too important to leave edited.
func sameConfig(cur, rendered client.Object) bool {
	switch c := cur.(type) {
	case *corev1.ConfigMap:
		r, ok := rendered.(*corev1.ConfigMap)
		return !ok || equality.Semantic.DeepEqual(c.Data, r.Data) && equality.Semantic.DeepEqual(c.BinaryData, r.BinaryData)
	case *corev1.Secret:
		r, ok := rendered.(*corev1.Secret)
		return !ok || equality.Semantic.DeepEqual(c.Data, r.Data)
	}
	return true
}

func isSecret(o client.Object) bool {
	_, ok := o.(*corev1.Secret)
	return ok
}

// contentHash returns a digest of an apply object, to tell whether it changed since the last
// apply without sending it: most reconciles (an unrelated EndpointSlice changed) render the
// same objects again, and skipping those saves three API writes per Gateway each time.
func contentHash(u *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(u.Object) // maps marshal with sorted keys: the digest is stable
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

func withAnnotation(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// toApplyObject converts a typed object into the unstructured form server-side apply takes,
// without status and the server-owned metadata a typed object always carries.
func (r *Reconciler) toApplyObject(obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, r.client.Scheme())
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	delete(u.Object, "status")
	for _, f := range []string{"resourceVersion", "uid", "generation", "managedFields", "selfLink"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	dropNullTimestamps(u.Object)
	return u, nil
}

// dropNullTimestamps removes the "creationTimestamp": null that every typed ObjectMeta
// (including pod templates) converts to, so the apply states no opinion about it.
func dropNullTimestamps(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			if k == "creationTimestamp" {
				delete(m, k)
			}
		case map[string]any:
			dropNullTimestamps(v)
		case []any:
			for _, e := range v {
				if em, ok := e.(map[string]any); ok {
					dropNullTimestamps(em)
				}
			}
		}
	}
}

// replicasOwnedByOthers reports whether a field manager other than the operator owns
// spec.replicas of d: then an autoscaler or a person has taken over the replica count.
func replicasOwnedByOthers(d *appsv1.Deployment) bool {
	for _, mf := range d.ManagedFields {
		if mf.Manager == FieldOwner || mf.FieldsV1 == nil {
			continue
		}
		if fieldsHave(mf.FieldsV1, "f:spec", "f:replicas") {
			return true
		}
	}
	return false
}

// fieldsHave reports whether a managedFields entry's field set contains the path.
func fieldsHave(f *metav1.FieldsV1, path ...string) bool {
	var m map[string]any
	if err := json.Unmarshal(f.GetRawBytes(), &m); err != nil {
		return false
	}
	for i, p := range path {
		v, ok := m[p]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return false
}
