package controller

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// appliedMemo remembers, across reconciles, what the operator last applied (or found applied)
// for each object it renders: a digest of the rendered object's JSON and the HashAnnotation
// that rendering leads to. With every Gateway rendered on every event, most objects are
// rendered exactly as before; for those, apply takes the hash from here instead of building
// the server-side apply object and hashing it again (toApplyObject and contentHash, most of a
// steady-state reconcile's apply time). The cached object is still read and its hash
// annotation, controller and data compared with what was rendered, as without the memo, so
// an object deleted or edited by someone else is repaired as before.
//
// The digest covers the whole typed object, owner reference (and so the Gateway's UID)
// included, and the apply object and its hash are a function of it, so a hit gives the hash
// apply would compute. Entries not used by a reconcile are dropped at its end (rotate), so the
// memo's size follows the objects rendered; it starts empty, so a restarted operator checks
// every object the full way once. Safe for concurrent use; the zero value is ready.
type appliedMemo struct {
	mu        sync.Mutex
	cur, prev map[appliedKey]appliedEntry
}

type appliedKey struct {
	kind string
	name types.NamespacedName
}

type appliedEntry struct {
	digest [sha256.Size]byte
	hash   string // the HashAnnotation the object was applied with
}

// renderedDigest returns a SHA-256 of obj's JSON, or ok false when it cannot be marshalled.
func renderedDigest(obj client.Object) (d [sha256.Size]byte, ok bool) {
	b, err := json.Marshal(obj)
	if err != nil {
		return d, false
	}
	return sha256.Sum256(b), true
}

func keyOf(obj client.Object) appliedKey {
	return appliedKey{kind: kindOf(obj), name: client.ObjectKeyFromObject(obj)}
}

// hash returns the HashAnnotation obj was last applied with when it was rendered with the
// same digest then.
func (m *appliedMemo) hash(obj client.Object, digest [sha256.Size]byte) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := keyOf(obj)
	e, ok := m.cur[k]
	if !ok {
		e, ok = m.prev[k]
	}
	if !ok || e.digest != digest {
		return "", false
	}
	m.setLocked(k, e)
	return e.hash, true
}

// remember records that obj, rendered with digest, is applied with hash.
func (m *appliedMemo) remember(obj client.Object, digest [sha256.Size]byte, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(keyOf(obj), appliedEntry{digest: digest, hash: hash})
}

func (m *appliedMemo) setLocked(k appliedKey, e appliedEntry) {
	if m.cur == nil {
		m.cur = map[appliedKey]appliedEntry{}
	}
	m.cur[k] = e
}

// forget drops obj's entry: its apply failed, so the next reconcile checks it the full way.
func (m *appliedMemo) forget(obj client.Object) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := keyOf(obj)
	delete(m.cur, k)
	delete(m.prev, k)
}

// rotate starts a reconcile: entries the reconcile before did not use are forgotten.
func (m *appliedMemo) rotate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prev, m.cur = m.cur, make(map[appliedKey]appliedEntry, len(m.cur))
}

// routeMemo remembers, across reconciles, the routes whose status already held what render
// computed for this controller: the route's resourceVersion then and a digest of render's
// parent statuses for it. A route with the same resourceVersion (nobody wrote it since, its
// status included) and the same rendered parents needs no write, so writeRouteStatuses skips
// merging and comparing its parents, which for a thousand routes is a good part of a
// reconcile. Entries not used by a reconcile are dropped at its end (rotate). Safe for
// concurrent use; the zero value is ready.
type routeMemo struct {
	mu        sync.Mutex
	cur, prev map[appliedKey]routeEntry
}

type routeEntry struct {
	resourceVersion string
	digest          [sha256.Size]byte
}

// parentsDigest returns a SHA-256 of the JSON of render's parent statuses of a route.
func parentsDigest(ps []gwapiv1.RouteParentStatus) (d [sha256.Size]byte, ok bool) {
	b, err := json.Marshal(ps)
	if err != nil {
		return d, false
	}
	return sha256.Sum256(b), true
}

// upToDate reports whether the route group/ns/name at resourceVersion was found up to date
// with parents of this digest.
func (m *routeMemo) upToDate(group string, name types.NamespacedName, resourceVersion string, digest [sha256.Size]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := appliedKey{kind: group, name: name}
	e, ok := m.cur[k]
	if !ok {
		e, ok = m.prev[k]
	}
	if !ok || e.resourceVersion != resourceVersion || e.digest != digest {
		return false
	}
	if m.cur == nil {
		m.cur = map[appliedKey]routeEntry{}
	}
	m.cur[k] = e
	return true
}

// remember records that the route at resourceVersion holds the parents of this digest.
func (m *routeMemo) remember(group string, name types.NamespacedName, resourceVersion string, digest [sha256.Size]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		m.cur = map[appliedKey]routeEntry{}
	}
	m.cur[appliedKey{kind: group, name: name}] = routeEntry{resourceVersion: resourceVersion, digest: digest}
}

// rotate starts a reconcile: entries the reconcile before did not use are forgotten.
func (m *routeMemo) rotate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prev, m.cur = m.cur, make(map[appliedKey]routeEntry, len(m.cur))
}
