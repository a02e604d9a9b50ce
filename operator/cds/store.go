package cds

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
)

// subscriptionBuffer is how many updates a watcher may fall behind by. A
// watcher further behind is cut off (its connection closed) rather than
// slowing down the others; STUNner's clients reconnect and get the current
// state first.
const subscriptionBuffer = 64

// Store holds the served configs, one per Gateway ("namespace/name"), and
// the watchers of them. The zero value is not usable: use NewStore.
type Store struct {
	mu      sync.Mutex
	configs map[string][]byte // "namespace/name" -> config JSON
	subs    map[*subscription]struct{}
}

// subscription is one watcher: of every config (namespace ""), of a
// namespace (name ""), or of one Gateway's.
type subscription struct {
	namespace, name string
	// ch gets each config, in order; it is closed when the watcher fell
	// too far behind or the store stopped serving it.
	ch     chan []byte
	closed bool
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{configs: map[string][]byte{}, subs: map[*subscription]struct{}{}}
}

// Update makes configs ("namespace/name" -> STUNner v1 config JSON) the
// served state of the world, as the operator's render of every Gateway
// gives it. Each watcher of a Gateway whose config changed or appeared gets
// the new config; each watcher of one that is gone gets its deletion,
// STUNner's zero config (ZeroConfig). An unchanged config sends nothing.
func (s *Store) Update(configs map[string][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(s.configs)) {
		if _, ok := configs[id]; !ok {
			delete(s.configs, id)
			s.notify(id, ZeroConfig(id))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(configs)) {
		c := configs[id]
		if old, ok := s.configs[id]; ok && bytes.Equal(old, c) {
			continue
		}
		s.configs[id] = bytes.Clone(c)
		s.notify(id, s.configs[id])
	}
}

// notify sends c, the config of id, to each watcher of it; s.mu is held.
func (s *Store) notify(id string, c []byte) {
	ns, name, _ := strings.Cut(id, "/")
	for sub := range s.subs {
		if sub.matches(ns, name) {
			sub.send(c)
		}
	}
}

// List returns the configs of namespace ("" for every namespace), sorted
// by namespace and name.
func (s *Store) List(namespace string) []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []json.RawMessage{}
	for _, id := range slices.Sorted(maps.Keys(s.configs)) {
		if ns, _, _ := strings.Cut(id, "/"); namespace == "" || ns == namespace {
			out = append(out, s.configs[id])
		}
	}
	return out
}

// Get returns the config of the Gateway namespace/name.
func (s *Store) Get(namespace, name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.configs[namespace+"/"+name]
	return c, ok
}

// subscribe registers a watcher of namespace/name ("" for any) and queues
// the current configs it watches, so a watcher always starts from the
// state of the world.
func (s *Store) subscribe(namespace, name string) *subscription {
	sub := &subscription{namespace: namespace, name: name, ch: make(chan []byte, subscriptionBuffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs[sub] = struct{}{}
	for _, id := range slices.Sorted(maps.Keys(s.configs)) {
		ns, n, _ := strings.Cut(id, "/")
		if sub.matches(ns, n) {
			sub.send(s.configs[id])
		}
	}
	return sub
}

// unsubscribe removes sub and closes its channel.
func (s *Store) unsubscribe(sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
	sub.close()
}

// Watchers is the number of open watches.
func (s *Store) Watchers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

func (sub *subscription) matches(namespace, name string) bool {
	return (sub.namespace == "" || sub.namespace == namespace) && (sub.name == "" || sub.name == name)
}

// send queues c, or closes sub when it is full; the store's lock is held.
func (sub *subscription) send(c []byte) {
	if sub.closed {
		return
	}
	select {
	case sub.ch <- c:
	default:
		sub.close()
	}
}

func (sub *subscription) close() {
	if !sub.closed {
		sub.closed = true
		close(sub.ch)
	}
}
