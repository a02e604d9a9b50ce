package controller

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/operator/render"
)

func TestReplicasOwnedByOthers(t *testing.T) {
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    bool
	}{
		{"only the operator", []metav1.ManagedFieldsEntry{entry(FieldOwner, `{"f:spec":{"f:replicas":{}}}`)}, false},
		{"autoscaler owns replicas", []metav1.ManagedFieldsEntry{
			entry(FieldOwner, `{"f:spec":{"f:template":{}}}`),
			entry("kube-controller-manager", `{"f:spec":{"f:replicas":{}}}`),
		}, true},
		{"other manager, other fields", []metav1.ManagedFieldsEntry{entry("kubectl", `{"f:metadata":{"f:labels":{}}}`)}, false},
		{"status only", []metav1.ManagedFieldsEntry{entry("kube-controller-manager", `{"f:status":{"f:replicas":{}}}`)}, false},
		{"undecodable fields ignored", []metav1.ManagedFieldsEntry{entry("x", `not json`)}, false},
		{"no managed fields", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ManagedFields: tt.entries}}
			if got := replicasOwnedByOthers(d); got != tt.want {
				t.Errorf("replicasOwnedByOthers = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDropNullTimestamps(t *testing.T) {
	in := map[string]any{
		"metadata": map[string]any{"name": "x", "creationTimestamp": nil},
		"spec": map[string]any{
			"template":   map[string]any{"metadata": map[string]any{"creationTimestamp": nil, "labels": map[string]any{"a": "b"}}},
			"containers": []any{map[string]any{"name": "c", "creationTimestamp": nil}},
			"keep":       map[string]any{"creationTimestamp": "2026-01-01T00:00:00Z"},
		},
	}
	want := map[string]any{
		"metadata": map[string]any{"name": "x"},
		"spec": map[string]any{
			"template":   map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "b"}}},
			"containers": []any{map[string]any{"name": "c"}},
			"keep":       map[string]any{"creationTimestamp": "2026-01-01T00:00:00Z"},
		},
	}
	dropNullTimestamps(in)
	if !reflect.DeepEqual(in, want) {
		t.Errorf("got  %v\nwant %v", in, want)
	}
}

func TestContentHash(t *testing.T) {
	obj := func(kv ...string) *unstructured.Unstructured {
		data := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			data[kv[i]] = kv[i+1]
		}
		return &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "data": data}}
	}
	a1, _ := contentHash(obj("a", "1", "b", "2"))
	a2, _ := contentHash(obj("b", "2", "a", "1"))
	b, _ := contentHash(obj("a", "1", "b", "3"))
	if a1 != a2 {
		t.Errorf("same content, different hashes %s %s: map order must not matter", a1, a2)
	}
	if a1 == b {
		t.Errorf("different content, same hash %s", a1)
	}
}

// TestCheckApplicable: what render returns passes as is, and an object that lost what prune and
// the cache rely on is refused rather than repaired.
func TestCheckApplicable(t *testing.T) {
	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", UID: "uid-1"}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "g",
		Labels: map[string]string{render.LabelManagedBy: render.LabelManagedByValue},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: gwapiv1.GroupVersion.String(), Kind: "Gateway",
			Name: "g", UID: "uid-1", Controller: ptr(true)}},
	}}
	if err := checkApplicable(cm, gw); err != nil {
		t.Fatalf("rendered object refused: %v", err)
	}
	for name, edit := range map[string]func(*corev1.ConfigMap){
		"other namespace": func(o *corev1.ConfigMap) { o.Namespace = "other" },
		"no label":        func(o *corev1.ConfigMap) { o.Labels = nil },
		"other owner":     func(o *corev1.ConfigMap) { o.OwnerReferences[0].UID = "uid-2" },
		"owner, not controller": func(o *corev1.ConfigMap) {
			o.OwnerReferences[0].Controller = nil
		},
	} {
		o := cm.DeepCopy()
		edit(o)
		if err := checkApplicable(o, gw); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
