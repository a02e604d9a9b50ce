package soak

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The hardening attacks of issue 22, by name, in the order of its items. Each runs for at
// most Config.AttackTime (or until its work is done), one after another, once the legitimate
// clients have allocated, while they keep relaying; its own checks are AttackResult.Failures.
// Item 7, the auth service, is another binary's (tern-operator) and has its own tests.
const (
	AttackSpoof      = "spoof"      // item 1: forged nonces from a victim's address
	AttackAdmin      = "admin"      // item 2: keep-alive connections to the health port
	AttackHalfFrames = "halfframes" // item 3: TCP connections that send most of a 65,000-byte frame
	AttackDTLS       = "dtls"       // item 4: DTLS garbage and cookieless ClientHellos
	AttackBudget     = "budget"     // item 5: permissions and channels with valid credentials
	AttackMetadata   = "metadata"   // item 6: CreatePermission to cloud metadata addresses
	AttackRotate     = "rotate"     // item 8: wrong passwords from rotating source addresses
	AttackSelf       = "self"       // item 9: relaying to ternd's own listeners
	AttackReflect    = "reflect"    // item 10: unauthenticated Allocates as reflection
)

// AllAttacks is every hardening attack, in the order they run.
var AllAttacks = []string{AttackSpoof, AttackAdmin, AttackHalfFrames, AttackDTLS, AttackBudget,
	AttackMetadata, AttackRotate, AttackSelf, AttackReflect}

// attackItem is the issue 22 item each attack replays.
var attackItem = map[string]int{AttackSpoof: 1, AttackAdmin: 2, AttackHalfFrames: 3, AttackDTLS: 4,
	AttackBudget: 5, AttackMetadata: 6, AttackRotate: 8, AttackSelf: 9, AttackReflect: 10}

// ParseAttacks parses a comma-separated list of attack names; "all" is AllAttacks and ""
// none. The result is in AllAttacks' order.
func ParseAttacks(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	if s == "all" {
		return slices.Clone(AllAttacks), nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if _, ok := attackItem[n]; !ok {
			return nil, fmt.Errorf("attack %q: want all or some of %s", n, strings.Join(AllAttacks, ","))
		}
		want[n] = true
	}
	var out []string
	for _, n := range AllAttacks {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// AttackResult is what one hardening attack did and what it cost the server.
type AttackResult struct {
	Name string `json:"name"`
	Item int    `json:"item"`
	// Start and End are since the start of the run.
	Start time.Duration `json:"start_ns"`
	End   time.Duration `json:"end_ns"`
	// Summary is one line of figures; Figures the same as numbers, for JSON.
	Summary string             `json:"summary"`
	Figures map[string]float64 `json:"figures,omitempty"`
	// Failures are the attack's own goals that were missed (a locked-out victim, an
	// answered metadata address, ...), each a sentence.
	Failures []string `json:"failures,omitempty"`
	// BaseRSS is the server's RSS at the start, PeakRSS the highest sampled until the end
	// (bytes); BaseGoroutines and PeakGoroutines the same of its go_goroutines metric;
	// PeakFDs its open descriptors.
	BaseRSS        int64   `json:"base_rss_bytes"`
	PeakRSS        int64   `json:"peak_rss_bytes"`
	BaseGoroutines float64 `json:"base_goroutines"`
	PeakGoroutines float64 `json:"peak_goroutines"`
	PeakFDs        int     `json:"peak_fds"`
}

func (a *AttackResult) failf(format string, args ...any) {
	a.Failures = append(a.Failures, fmt.Sprintf(format, args...))
}

// attacker is one hardening attack.
type attacker interface {
	// run attacks until ctx ends or the attack is done, and cleans up (closes its
	// connections, releases its allocations) before it returns.
	run(ctx context.Context)
	// report fills r's Summary, Figures and Failures; r's peaks are already set.
	report(r *AttackResult)
}

func newAttacker(name string, cfg Config) attacker {
	switch name {
	case AttackSpoof:
		return &spoofer{cfg: cfg}
	case AttackAdmin:
		return &adminHolder{cfg: cfg}
	case AttackHalfFrames:
		return &halfFramer{cfg: cfg}
	case AttackDTLS:
		return &dtlsFlooder{cfg: cfg}
	case AttackBudget:
		return &budgetFiller{cfg: cfg}
	case AttackMetadata:
		return &metadataProber{cfg: cfg}
	case AttackRotate:
		return &rotator{cfg: cfg}
	case AttackSelf:
		return &selfRelayer{cfg: cfg}
	case AttackReflect:
		return &reflector{cfg: cfg}
	}
	return nil
}

// runAttacks runs cfg.Attacks one after another, each for at most cfg.AttackTime, with a
// sample of the server before and after each, and returns their results.
func runAttacks(ctx context.Context, cfg Config, s *sampler) []AttackResult {
	var out []AttackResult
	for _, name := range cfg.Attacks {
		if ctx.Err() != nil {
			break
		}
		a := newAttacker(name, cfg)
		r := AttackResult{Name: name, Item: attackItem[name], Start: time.Since(s.start)}
		first := s.sample()
		limit := cfg.AttackTime
		if l, ok := a.(interface {
			timeLimit(time.Duration) time.Duration
		}); ok {
			limit = l.timeLimit(limit)
		}
		actx, cancel := context.WithTimeout(ctx, limit)
		a.run(actx)
		cancel()
		r.End = time.Since(s.start)
		last := s.sample()
		s.peaks(first, last, &r)
		a.report(&r)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "attack %s (item %d): %s\n", name, r.Item, r.Summary)
		}
		out = append(out, r)
	}
	return out
}

// countMap formats a count per code in key order: "403 ×12, 438 ×3".
func countMap[V int | uint64](m map[int]V) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := fmt.Sprint(k)
		if k == 0 {
			name = "success"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, m[k]))
	}
	return strings.Join(parts, ", ")
}
