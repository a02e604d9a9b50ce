package allowlist

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
)

// DefaultResolveInterval is how often a Resolver re-resolves its host
// names. Go's resolver does not return the answer's TTL, so names are
// re-resolved on a fixed period instead of on their TTL; 5 s is the TTL
// CoreDNS gives cluster-local names by default, so an ExternalName or
// headless Service's change reaches the allowlist about as fast as a TTL-
// honouring client would see it, at the cost of one query per name every
// 5 s.
const DefaultResolveInterval = 5 * time.Second

// resolveTimeout bounds one lookup, so that a dead DNS server delays a
// config change or a re-resolution round by at most this much.
const resolveTimeout = 2 * time.Second

// Lookuper is what a Resolver asks; *net.Resolver is one.
type Lookuper interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Resolver keeps the addresses of STRICT_DNS clusters' host names current.
// SetClusters resolves names it has not seen before at once; a background
// loop re-resolves every name each interval and calls onChange when any
// answer changed, so that the owner rebuilds its allowlists with Lookup.
//
// A lookup that fails for a reason other than "no such host" (timeout,
// server failure) keeps the previous answer: a DNS hiccup must not cut off
// peers that clients are relaying to. "No such host" empties the answer.
type Resolver struct {
	res      Lookuper
	interval time.Duration
	log      *slog.Logger
	onChange func()

	mu      sync.Mutex
	answers map[string][]netip.Addr // every wanted host, with its latest answer (sorted)

	ctx    context.Context
	cancel context.CancelFunc
}

// NewResolver starts a Resolver that asks res (net.DefaultResolver when
// nil) every interval (DefaultResolveInterval when not positive) and calls
// onChange, from its own goroutine, after an answer changed. Rounds do not
// overlap: a slow onChange delays the next one.
func NewResolver(res Lookuper, interval time.Duration, log *slog.Logger, onChange func()) *Resolver {
	if res == nil {
		res = net.DefaultResolver
	}
	if interval <= 0 {
		interval = DefaultResolveInterval
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Resolver{res: res, interval: interval, log: log, onChange: onChange, answers: map[string][]netip.Addr{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.loop()
	return r
}

// SetClusters makes the host names of clusters' STRICT_DNS clusters the
// ones kept current, forgetting others. Names new to the Resolver are
// resolved before it returns (each within resolveTimeout, concurrently), so
// an allowlist built right after holds them; it does not call onChange.
func (r *Resolver) SetClusters(clusters []config.Cluster) {
	want := map[string]bool{}
	for _, c := range clusters {
		if c.IsStrictDNS() {
			for _, h := range c.Endpoints {
				want[h] = true
			}
		}
	}
	r.mu.Lock()
	for h := range r.answers {
		if !want[h] {
			delete(r.answers, h)
		}
	}
	var fresh []string
	for h := range want {
		if _, ok := r.answers[h]; !ok {
			fresh = append(fresh, h)
		}
	}
	r.mu.Unlock()
	got := r.resolveAll(fresh)
	r.mu.Lock()
	for i, h := range fresh {
		r.answers[h] = got[i].addrs // nil when the first lookup failed: retried next round
	}
	r.mu.Unlock()
}

// Lookup returns the latest answer for host: its IPv4 and IPv6 addresses,
// sorted, or nil when it has none or is not a wanted name. The slice must
// not be modified.
func (r *Resolver) Lookup(host string) []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answers[host]
}

// Close stops re-resolving. It does not wait for a round under way, which
// then drops its result; onChange is not called after Close returns unless
// a call was already under way.
func (r *Resolver) Close() { r.cancel() }

type answer struct {
	addrs []netip.Addr
	ok    bool // false: keep the previous answer
}

func (r *Resolver) resolveAll(hosts []string) []answer {
	out := make([]answer, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.resolve(h)
		}()
	}
	wg.Wait()
	return out
}

func (r *Resolver) resolve(host string) answer {
	ctx, cancel := context.WithTimeout(r.ctx, resolveTimeout)
	defer cancel()
	addrs, err := r.res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			r.log.Warn("STRICT_DNS host name not found: no peers from it", "host", host)
			return answer{ok: true}
		}
		if r.ctx.Err() == nil {
			r.log.Warn("STRICT_DNS lookup failed, keeping the previous answer", "host", host, "error", err)
		}
		return answer{}
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap().WithZone("")
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return answer{addrs: slices.Compact(addrs), ok: true}
}

func (r *Resolver) loop() {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		hosts := make([]string, 0, len(r.answers))
		for h := range r.answers {
			hosts = append(hosts, h)
		}
		r.mu.Unlock()
		got := r.resolveAll(hosts)
		if r.ctx.Err() != nil {
			return
		}
		changed := false
		r.mu.Lock()
		for i, h := range hosts {
			old, wanted := r.answers[h]
			if !wanted || !got[i].ok || slices.Equal(old, got[i].addrs) {
				continue
			}
			r.log.Info("STRICT_DNS answer changed", "host", h, "addresses", got[i].addrs, "previous", old)
			r.answers[h] = got[i].addrs
			changed = true
		}
		r.mu.Unlock()
		if changed && r.onChange != nil {
			r.onChange()
		}
	}
}
