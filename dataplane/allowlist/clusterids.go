package allowlist

import "sync"

// ClusterIDs numbers clusters by name for per-cluster counters: the first
// name asked for gets 1, the next 2, and so on. A name keeps its number for
// the life of the ClusterIDs, across config changes that drop and restore
// the cluster, so counters kept by number never change hands. The zero
// value is ready; a nil *ClusterIDs numbers everything 0. Safe for
// concurrent use.
type ClusterIDs struct {
	mu  sync.Mutex
	ids map[string]uint32
}

// ID returns name's number, assigning the next one when name is new; 0 for
// a nil ClusterIDs.
func (c *ClusterIDs) ID(name string) uint32 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.ids[name]; ok {
		return id
	}
	if c.ids == nil {
		c.ids = map[string]uint32{}
	}
	id := uint32(len(c.ids) + 1)
	c.ids[name] = id
	return id
}
