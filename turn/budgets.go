package turn

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// Failure budgets beside the per-address throttle (throttle.go). The
// per-address bucket alone lets an attacker with many addresses (an IPv6
// /48 is 65,536 /64s) multiply its rate of password guesses by their
// number, so two more token buckets take the same failures:
//
//   - one per USERNAME (userKey), of userFailureScale times the per-address
//     burst and rate: guesses at one user's password, from any number of
//     addresses, are answered at most that often;
//   - one for the whole engine (totalFailures), of totalFailureScale times
//     the per-address burst and rate: guesses spread over many usernames
//     (any username is a valid guess under ephemeral auth) are too.
//
// A request that finds either empty is dropped unanswered before its
// password is checked, like a throttled address's, when its source address
// has itself failed recently (its own bucket is below its burst), unless
// that address authenticated as the same username within trustedFor (the
// trusted table). So clients that were in before an attack keep refreshing
// and allocating, and a new client, whose address has not failed, is
// never shut out by failures of other addresses: under static auth every
// client shares one username, and a guesser with a handful of addresses
// must not be able to keep everyone else out. A guesser that rotates
// addresses gets one answered guess per fresh address (IPv6: per /64)
// while the budget is empty, and its address then waits for its own
// bucket to refill to the full burst before it counts as fresh again.
//
// Like the address buckets, the username buckets are a fixed
// set-associative table (4,096 buckets), keyed by a 128-bit keyed hash of
// the username, so memory does not grow with the usernames tried.
const (
	userFailureScale  = 10
	totalFailureScale = 100
	// trustedFor is how long a successful authentication exempts its
	// source address from the username and total budgets, for that
	// username: longer than the default allocation lifetime (600 s), so a
	// live allocation, which refreshes within its lifetime, stays trusted.
	trustedFor = time.Hour
)

// userKeySeeds key the username hash, drawn once per process so that no
// one can choose usernames whose keys collide with another's.
var userKeySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// userKey is the key of username's failure bucket: a 128-bit keyed hash.
func userKey(username string) peerKey {
	return peerKey{hi: maphash.String(userKeySeeds[0], username), lo: maphash.String(userKeySeeds[1], username)}
}

// sourceUserKey is the key of (source address, username) in the trusted
// table: a 128-bit keyed hash of both.
func sourceUserKey(src netip.Addr, username string) peerKey {
	a := src.As16()
	var k [2]uint64
	for i := range k {
		var h maphash.Hash
		h.SetSeed(userKeySeeds[i])
		_, _ = h.Write(a[:])
		_, _ = h.WriteString(username)
		k[i] = h.Sum64()
	}
	return peerKey{hi: k[0], lo: k[1], port: 1}
}

// totalBucket is the engine-wide failure budget: one token bucket.
type totalBucket struct {
	mu sync.Mutex
	b  bucket // b.used is false until the first failure: a full bucket
}

// allow reports whether the bucket has a token at now (unix ns).
func (t *totalBucket) allow(now int64, burst, rate float64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.b.used {
		return true
	}
	t.b.refill(now, burst, rate)
	return t.b.tokens >= 1
}

// fail takes a token at now (unix ns).
func (t *totalBucket) fail(now int64, burst, rate float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.b.used {
		t.b = bucket{used: true, tokens: burst, last: now}
	}
	t.b.refill(now, burst, rate)
	t.b.tokens = max(t.b.tokens-1, 0)
}

// trusted remembers which source addresses (quotaAddr) authenticated as
// which username, and when: a fixed set-associative table like the
// throttle's, 4,096 entries, in which a new entry replaces the oldest of
// its set. Only a successful authentication adds one, so a guesser cannot
// evict the entries of real clients except by knowing a password.
type trusted struct {
	shards [throttleShards]trustedShard
}

type trustedShard struct {
	mu   sync.Mutex
	sets [throttleSets][throttleWays]trustedEntry
	_    [64]byte // keeps shards' mutexes off one cache line
}

type trustedEntry struct {
	key  peerKey
	last int64 // unix ns of the last success; 0: unused
}

func (t *trusted) find(k peerKey) (*trustedShard, *[throttleWays]trustedEntry) {
	h := k.hash()
	s := &t.shards[h%throttleShards]
	return s, &s.sets[(h/throttleShards)%throttleSets]
}

// add records a success of k at now (unix ns).
func (t *trusted) add(k peerKey, now int64) {
	s, set := t.find(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	oldest := &set[0]
	for i := range set {
		e := &set[i]
		if e.last != 0 && e.key == k {
			e.last = max(e.last, now)
			return
		}
		if e.last < oldest.last {
			oldest = e
		}
	}
	*oldest = trustedEntry{key: k, last: now}
}

// has reports whether k succeeded within trustedFor before now (unix ns).
func (t *trusted) has(k peerKey, now int64) bool {
	s, set := t.find(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range set {
		if e := &set[i]; e.last != 0 && e.key == k {
			return now-e.last < int64(trustedFor)
		}
	}
	return false
}

// budgetsAllow reports whether a request with MESSAGE-INTEGRITY and a live
// nonce from src (quotaAddr; srcKey is its keyOfAddr) as user (usrKey is
// its userKey) may have its password checked at now (unix ns), given the
// per-address burst and rate (per second): src's own bucket must hold a
// token, and so must user's and the engine's unless src recently
// authenticated as user or has not failed itself.
func (e *Engine) budgetsAllow(src netip.Addr, srcKey, usrKey peerKey, user string, now int64, burst, rate float64) bool {
	if !e.throttle.allow(srcKey, now, burst, rate) {
		return false
	}
	if e.userFailures.allow(usrKey, now, burst*userFailureScale, rate*userFailureScale) &&
		e.totalFailures.allow(now, burst*totalFailureScale, rate*totalFailureScale) {
		return true
	}
	return e.trustedSrc.has(sourceUserKey(src, user), now) || e.throttle.clean(srcKey, now, burst, rate)
}
