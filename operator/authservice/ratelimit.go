package authservice

import (
	"hash/maphash"
	"math"
	"net/netip"
	"sync"
	"time"
)

// The rate limit keeps a token bucket per client address in a fixed
// table, so that its memory stays bounded whatever addresses call:
// limiterSets sets of limiterWays buckets (set-associative, like a CPU
// cache), 8,192 buckets of 40 bytes, about 320 KiB. An address not in the
// table has a full bucket. A new address takes the bucket of its set that
// holds the most tokens once refilled: a full bucket says no more than an
// absent one, so callers that come once evict each other and leave the
// drained buckets of busy callers in place. The set is chosen by a hash
// with a per-process random seed, so a caller cannot aim its addresses at
// one set.
const (
	limiterSets = 1024
	limiterWays = 8
)

// limiterBucket is one address's bucket.
type limiterBucket struct {
	key    [16]byte // the address (IPv4-mapped for IPv4, an IPv6 /64's prefix)
	used   bool
	tokens float64
	last   int64 // unix ns of the last refill
}

// refill brings b's tokens up to date at now.
func (b *limiterBucket) refill(now int64, burst, rate float64) {
	if now > b.last {
		b.tokens = min(burst, b.tokens+rate*float64(now-b.last)/float64(time.Second))
		b.last = now
	}
}

// limiter is a token bucket per client address: burst requests at once,
// rate more per second. It is safe for concurrent use.
type limiter struct {
	rate, burst float64
	seed        maphash.Seed
	mu          sync.Mutex
	sets        [limiterSets][limiterWays]limiterBucket
}

func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(max(burst, 1)), seed: maphash.MakeSeed()}
}

// limiterKey is what the limiter counts a client by: its address, and an
// IPv6 client's /64, which one host or subscriber holds whole (RFC 6177),
// so that walking a /64 does not multiply the rate.
func limiterKey(ip netip.Addr) [16]byte {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	return ip.As16()
}

// allow takes a token from ip's bucket at now and returns 0, or, when the
// bucket is empty, returns how long until it holds a token again (at least
// one second: Retry-After counts whole seconds).
func (l *limiter) allow(ip netip.Addr, now time.Time) time.Duration {
	k := limiterKey(ip)
	set := &l.sets[maphash.Bytes(l.seed, k[:])%limiterSets]
	t := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *limiterBucket
	for i := range set {
		if set[i].used && set[i].key == k {
			b = &set[i]
			b.refill(t, l.burst, l.rate)
			break
		}
	}
	if b == nil {
		// Evict the bucket with the most tokens (an unused one first).
		best := -1.0
		for i := range set {
			c := &set[i]
			tokens := math.Inf(1)
			if c.used {
				c.refill(t, l.burst, l.rate)
				tokens = c.tokens
			}
			if tokens > best {
				b, best = c, tokens
			}
		}
		*b = limiterBucket{key: k, used: true, tokens: l.burst, last: t}
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return max(wait, time.Second)
}
