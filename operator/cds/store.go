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
	configs map[string]served // by "namespace/name"
	subs    map[*subscription]struct{}
}

// served is one Gateway's config in its two forms: public, for every
// client, and private, with the credentials, for clients that reached the
// service through the Kubernetes API (Handler).
type served struct{ public, private []byte }

func (c served) get(private bool) []byte {
	if private && c.private != nil {
		return c.private
	}
	return c.public
}

// subscription is one watcher: of every config (namespace ""), of a
// namespace (name ""), or of one Gateway's.
type subscription struct {
	namespace, name string
	private         bool              // gets the configs with credentials
	allow           func(string) bool // the Gateways ("namespace/name") it may see; nil: every one
	// ch gets each config, in order; it is closed when the watcher fell
	// too far behind or the store stopped serving it.
	ch     chan []byte
	closed bool
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{configs: map[string]served{}, subs: map[*subscription]struct{}{}}
}

// Update makes configs ("namespace/name" -> STUNner v1 config JSON) the
// served state of the world, as the operator's render of every Gateway
// gives it; private holds the same configs with their credentials (a
// Gateway missing from it serves its public config to every client). Each
// watcher of a Gateway whose config changed or appeared gets the new
// config; each watcher of one that is gone gets its deletion, STUNner's
// zero config (ZeroConfig). An unchanged config sends nothing.
func (s *Store) Update(configs, private map[string][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(s.configs)) {
		if _, ok := configs[id]; !ok {
			delete(s.configs, id)
			zero := ZeroConfig(id)
			s.notify(id, served{zero, zero})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(configs)) {
		c := served{bytes.Clone(configs[id]), bytes.Clone(private[id])}
		if old, ok := s.configs[id]; ok && bytes.Equal(old.public, c.public) && bytes.Equal(old.private, c.private) {
			continue
		}
		s.configs[id] = c
		s.notify(id, c)
	}
}

// notify sends c, the config of id, to each watcher of it; s.mu is held.
func (s *Store) notify(id string, c served) {
	ns, name, _ := strings.Cut(id, "/")
	for sub := range s.subs {
		if sub.matches(ns, name) {
			sub.send(c.get(sub.private))
		}
	}
}

// List returns the configs of namespace ("" for every namespace), sorted
// by namespace and name, with credentials when private, of the Gateways
// ("namespace/name") allow allows (nil: every one); left is how many it
// left out for allow.
func (s *Store) List(namespace string, private bool, allow func(id string) bool) (configs []json.RawMessage, left int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []json.RawMessage{}
	for _, id := range slices.Sorted(maps.Keys(s.configs)) {
		if ns, _, _ := strings.Cut(id, "/"); namespace == "" || ns == namespace {
			if allow != nil && !allow(id) {
				left++
				continue
			}
			out = append(out, s.configs[id].get(private))
		}
	}
	return out, left
}

// Get returns the config of the Gateway namespace/name, public and with
// its credentials (nil when Update had none).
func (s *Store) Get(namespace, name string) (public, private []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.configs[namespace+"/"+name]
	return c.public, c.private, ok
}

// subscribe registers a watcher of namespace/name ("" for any) of the
// Gateways allow allows (nil: every one) and queues the current configs it
// watches, so a watcher always starts from the state of the world.
func (s *Store) subscribe(namespace, name string, private bool, allow func(id string) bool) *subscription {
	sub := &subscription{namespace: namespace, name: name, private: private, allow: allow, ch: make(chan []byte, subscriptionBuffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs[sub] = struct{}{}
	for _, id := range slices.Sorted(maps.Keys(s.configs)) {
		ns, n, _ := strings.Cut(id, "/")
		if sub.matches(ns, n) {
			sub.send(s.configs[id].get(private))
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
	return (sub.namespace == "" || sub.namespace == namespace) && (sub.name == "" || sub.name == name) &&
		(sub.allow == nil || sub.allow(namespace+"/"+name))
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
