package controller

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ownWrites remembers what the operator last applied to each of its ConfigMaps (the
// HashAnnotation, a digest of the data and the controlling Gateway's UID), so that the watch
// event of that write asks for no render. ConfigMaps are no input of render, and the render
// that event would ask for would find the ConfigMap as it renders it, and write nothing. Under
// a burst of EndpointSlice changes each touched Gateway's ConfigMap is written, and a full
// render after each write would hold up the renders of the next changes. Any other change of
// the ConfigMap that the operator would undo (its data or hash annotation edited, its
// controller changed, the ConfigMap deleted or its managed-by label removed, which the label
// selected cache sees as a deletion) still asks for a render. It is recorded before the
// apply is sent, as the watch event may come before the apply's answer. Safe for concurrent
// use; the zero value is ready.
type ownWrites struct {
	mu sync.Mutex
	cm map[types.NamespacedName]ownWrite
}

type ownWrite struct {
	hash       string
	data       [sha256.Size]byte
	controller types.UID
}

// configMapWrite returns what a ConfigMap holds that the operator renders, or false when it
// is no ConfigMap.
func configMapWrite(obj client.Object) (ownWrite, bool) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return ownWrite{}, false
	}
	b, err := json.Marshal([]any{cm.Data, cm.BinaryData}) // maps marshal with sorted keys
	if err != nil {
		return ownWrite{}, false
	}
	w := ownWrite{hash: cm.Annotations[HashAnnotation], data: sha256.Sum256(b)}
	if ref := metav1.GetControllerOf(cm); ref != nil {
		w.controller = ref.UID
	}
	return w, true
}

// applying records that the operator applies the ConfigMap rendered (when rendered is one)
// with HashAnnotation hash.
func (o *ownWrites) applying(rendered client.Object, hash string) {
	w, ok := configMapWrite(rendered)
	if !ok {
		return
	}
	w.hash = hash
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cm == nil {
		o.cm = map[types.NamespacedName]ownWrite{}
	}
	o.cm[client.ObjectKeyFromObject(rendered)] = w
}

// own reports whether obj is a ConfigMap as the operator last applied it.
func (o *ownWrites) own(obj client.Object) bool {
	w, ok := configMapWrite(obj)
	if !ok || w.hash == "" {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	applied, ok := o.cm[client.ObjectKeyFromObject(obj)]
	return ok && applied == w
}

// notOwnUpdate drops the update events of ConfigMaps as the operator last applied them.
func (o *ownWrites) notOwnUpdate() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !o.own(e.ObjectNew) }}
}
