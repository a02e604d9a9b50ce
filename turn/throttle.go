package turn

import (
	"sync"
	"time"
)

// The failed-authentication throttle keeps a token bucket per client
// address (quotaAddr: the IP, an IPv6 client's /64). A failure takes a
// token, and only a failure under a live nonce issued to that address
// counts (req.authenticate), so a forged source address cannot spend
// another address's tokens. A source with no token left has its requests
// that carry MESSAGE-INTEGRITY and a live nonce dropped unanswered, before
// the password is checked,
// so that neither a wrong-password flood is answered at line rate nor a
// correct guess told apart from a wrong one. Requests without
// MESSAGE-INTEGRITY, which every client's first Allocate is, are not
// throttled: their 401 is the smallest response the engine sends.
//
// The buckets live in a fixed table: throttleShards shards, each a mutex
// and throttleSets sets of throttleWays buckets (set-associative, like a
// CPU cache), 4,096 buckets in all, about 160 KiB. A source not in the
// table has a full bucket. A failure from a new source replaces the bucket
// of its set holding the most tokens once refilled: a full bucket says no
// more than an absent one, so a flood of spoofed one-off sources evicts
// its own kind and leaves the drained buckets of real offenders in place.
const (
	throttleShards = 16
	throttleSets   = 64
	throttleWays   = 4
)

type bucket struct {
	key    peerKey
	used   bool
	tokens float64
	last   int64 // unix ns of the last refill
}

// refill brings b's tokens up to date at now.
func (b *bucket) refill(now int64, burst, rate float64) {
	if now > b.last {
		b.tokens = min(burst, b.tokens+rate*float64(now-b.last)/float64(time.Second))
		b.last = now
	}
}

type throttleShard struct {
	mu   sync.Mutex
	sets [throttleSets][throttleWays]bucket
	_    [64]byte // keeps shards' mutexes off one cache line
}

type throttle struct {
	shards [throttleShards]throttleShard
}

// find returns the shard and set of k.
func (t *throttle) find(k peerKey) (*throttleShard, *[throttleWays]bucket) {
	h := k.hash()
	s := &t.shards[h%throttleShards]
	return s, &s.sets[(h/throttleShards)%throttleSets]
}

// allow reports whether k (an address's keyOfAddr, or a userKey) has a
// token left at now (unix ns): false means drop its request unanswered.
func (t *throttle) allow(k peerKey, now int64, burst, rate float64) bool {
	s, set := t.find(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range set {
		if b := &set[i]; b.used && b.key == k {
			b.refill(now, burst, rate)
			return b.tokens >= 1
		}
	}
	return true
}

// clean reports whether k has no recent failure at now (unix ns): it has
// no bucket, or its bucket has refilled to burst.
func (t *throttle) clean(k peerKey, now int64, burst, rate float64) bool {
	s, set := t.find(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range set {
		if b := &set[i]; b.used && b.key == k {
			b.refill(now, burst, rate)
			return b.tokens >= burst
		}
	}
	return true
}

// fail takes a token from k's bucket at now (unix ns), making one if
// needed.
func (t *throttle) fail(k peerKey, now int64, burst, rate float64) {
	s, set := t.find(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	var victim *bucket
	for i := range set {
		b := &set[i]
		if b.used && b.key == k {
			victim = b
			break
		}
		if !b.used {
			if victim == nil || victim.used {
				victim = b
			}
			continue
		}
		b.refill(now, burst, rate)
		if victim == nil || victim.used && b.tokens > victim.tokens {
			victim = b
		}
	}
	if !victim.used || victim.key != k {
		*victim = bucket{key: k, used: true, tokens: burst, last: now}
	}
	victim.refill(now, burst, rate)
	victim.tokens = max(victim.tokens-1, 0)
}
