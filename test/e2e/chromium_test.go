package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// Chromium's libwebrtc as a TURN client: testenv's page with two relay-only
// RTCPeerConnections calls itself through ternd, and the tests check where
// the relayed transport addresses were allocated.

// redirectNet is the /24 of TestChromiumRedirect's namespace: A is .1 and B .2.
const redirectNet = "10.11.0"

// chromiumMessages is how many data channel messages the page sends and
// expects echoed.
const chromiumMessages = 100

// turnURLs are the TURN URIs of ternd s for the page: over UDP, and over
// TCP when s has a TURN-TCP listener on the same port.
func turnURLs(s *server) []string {
	urls := []string{fmt.Sprintf("turn:%s?transport=udp", s.addr)}
	for _, l := range s.cfg.Listeners[1:] {
		if l.Protocol == "TURN-TCP" && l.Port == s.addr.Port {
			urls = append(urls, fmt.Sprintf("turn:%s?transport=tcp", s.addr))
		}
	}
	return urls
}

// withTCP adds a TURN-TCP listener on the TURN-UDP listener's port: an
// ALTERNATE-SERVER names one port for both transports.
func withTCP(c *config) {
	l := c.Listeners[0]
	c.Listeners = append(c.Listeners, listener{Name: "tcp", Protocol: "TURN-TCP", Address: l.Address, Port: l.Port, Routes: l.Routes})
}

// checkRelayed checks that the call connected, echoed every message, and
// that both ends of both sides' selected pairs are relay candidates in
// s's relay port range.
func checkRelayed(t *testing.T, res testenv.PageResult, s *server) {
	t.Helper()
	if res.Error != "" || !res.Connected {
		t.Fatalf("the call did not connect: %q (ICE errors %+v)", res.Error, res.ICEErrors)
	}
	if res.Echoed != chromiumMessages || res.Sent != chromiumMessages {
		t.Fatalf("sent %d, echoed %d messages, want %d", res.Sent, res.Echoed, chromiumMessages)
	}
	for side, p := range map[string]*testenv.PairStats{"offerer": res.Pair, "answerer": res.PairB} {
		if p == nil || p.Local == nil || p.Remote == nil {
			t.Fatalf("%s: no selected candidate pair in getStats()", side)
		}
		for end, c := range map[string]*testenv.CandidateStats{"local": p.Local, "remote": p.Remote} {
			r := s.cfg.Relay
			if c.CandidateType != "relay" || c.Address != r.Address || c.Port < r.MinPort || c.Port > r.MaxPort {
				t.Errorf("%s's %s candidate %s %s:%d, want a relay candidate in %s's relay range %s:%d-%d",
					side, end, c.CandidateType, c.Address, c.Port, s.cfg.Admin.Name, r.Address, r.MinPort, r.MaxPort)
			}
		}
	}
}

// TestChromiumRelay has Chromium call itself through ternd, relay-only on
// both sides, a data channel echoing 100 messages: once with ternd's
// TURN-UDP and TURN-TCP URIs (each side gathers a relay candidate from
// each), once with the TURN-TCP URI alone. The selected pairs are relay to
// relay in ternd's range, over TCP to ternd where TCP is all there is, and
// ternd counts the allocations. With both URIs the test does not ask which
// one the pair selected when the messages were through: libwebrtc nominates
// the first pair that works and may move to the higher-priority UDP one
// later, so that is a matter of timing (a CI run saw the answerer on TCP).
func TestChromiumRelay(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("the coturn target serves no TURN-TCP and no metrics")
	}
	testenv.ChromiumBinary(t)
	s := startTernd(t, withTCP)
	urls := turnURLs(s)
	if len(urls) != 2 {
		t.Fatalf("ternd's TURN URIs %v, want UDP and TCP", urls)
	}
	for _, tc := range []struct {
		name     string
		urls     []string
		selected string // relayProtocol of the selected pair's local candidates; "" either
	}{
		{"udp+tcp", urls, ""},
		{"tcp", urls[1:], "tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.metric(t, "stunner_allocations_active")
			res := testenv.RunChromium(t, testenv.PageConfig{
				ICEServers: []testenv.ICEServer{{URLs: tc.urls, Username: testUser, Credential: testPassword}},
				Messages:   chromiumMessages, GatherMs: 20000, ConnectMs: 20000,
			}).Result
			checkRelayed(t, res, s)
			for _, pc := range []string{"a", "b"} {
				for _, u := range tc.urls {
					found := false
					for _, c := range res.Candidates {
						found = found || (c.PC == pc && c.URL == u)
					}
					if !found {
						t.Errorf("peer connection %s gathered no relay candidate from %s", pc, u)
					}
				}
			}
			for side, p := range map[string]*testenv.PairStats{"offerer": res.Pair, "answerer": res.PairB} {
				t.Logf("%s's selected local candidate relayed over %s", side, p.Local.RelayProtocol)
				if tc.selected != "" && p.Local.RelayProtocol != tc.selected {
					t.Errorf("%s's selected local candidate relayed over %q, want %q", side, p.Local.RelayProtocol, tc.selected)
				}
			}
			// Each peer connection allocates once per URI.
			want := before + float64(2*len(tc.urls))
			if v, _ := s.metric(t, "stunner_allocations_active"); v < want {
				t.Errorf("stunner_allocations_active = %v during the call, want at least %v", v, want)
			}
		})
	}
}

// TestChromiumRedirect checks that Chromium follows ternd's 300 Try
// Alternate (RFC 8489 §10): two ternds with their own listener addresses
// (TURN-UDP and TURN-TCP on one port each) and relay ranges, A's
// alternates naming B, and Chromium given only A's URIs. A holds one
// pion/turn allocation and is draining (SIGTERM; the default grace period
// keeps it up) or full (limits.maxAllocations 1): every Allocate of
// Chromium's, over UDP and over TCP, is redirected, the call connects
// relay to relay in B's range, and A counts the redirects by reason and
// holds no allocation of Chromium's. With no alternate, A at capacity
// answers 508 and the page gathers no candidate, which it reports as a
// failed call within its bound.
//
// libwebrtc refuses an ALTERNATE-SERVER on loopback ("Blocking attempted
// redirect to loopback address", p2p/base/turn_port.cc), so the test runs
// in a network namespace of its own (testenv.InFreshNetns, as root) where
// a veth carries A's and B's addresses, redirectNet.
func TestChromiumRedirect(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's drain and ALTERNATE-SERVER")
	}
	testenv.ChromiumBinary(t)
	if testenv.InFreshNetns(t) {
		return
	}
	if os.Getenv("TERN_TEST_NETNS") != t.Name() {
		testenv.SkipOrFail(t, "needs root, to run in a network namespace of its own: libwebrtc refuses an ALTERNATE-SERVER on loopback")
	}
	// A veth pair with both addresses on one end: non-loopback addresses
	// in this namespace only, which goes when the test process ends.
	for _, args := range [][]string{
		{"link", "add", "tern0", "type", "veth", "peer", "name", "tern1"},
		{"addr", "add", redirectNet + ".1/24", "dev", "tern0"},
		{"addr", "add", redirectNet + ".2/24", "dev", "tern0"},
		{"link", "set", "tern0", "up"},
		{"link", "set", "tern1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// on puts a ternd's listeners and relay on address host of redirectNet.
	on := func(c *config, name, host string) {
		c.Admin.Name = name
		c.Listeners[0].Address, c.Relay.Address = redirectNet+host, redirectNet+host
		withTCP(c)
		// The peers are the server's own relayed addresses, which a
		// cluster must name exactly (a wider prefix leaves them out).
		c.Clusters[0].Endpoints = []string{redirectNet + host + "/32"}
		c.Offload = map[string]any{"engine": "None"} // nothing to attach to in this test
	}
	for _, tc := range []struct {
		name      string
		alternate bool
		drain     bool // SIGTERM A; otherwise A is full
		reason    string
	}{
		{name: "draining", alternate: true, drain: true, reason: "draining"},
		{name: "full", alternate: true, reason: "capacity"},
		{name: "full without alternate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b *server
			var alternates []string
			if tc.alternate {
				b = startTernd(t, func(c *config) { on(c, "B", ".2") })
				alternates = []string{b.addr.String()}
			}
			a := startTernd(t, func(c *config) {
				on(c, "A", ".1")
				c.Alternates = alternates
				if !tc.drain {
					c.Limits.MaxAllocations = 1
				}
				if b != nil {
					// Relay ranges that do not overlap, so the range
					// tells which server allocated a candidate.
					c.Relay.MinPort, c.Relay.MaxPort = 30000, 30999
					if b.cfg.Relay.MaxPort >= 30000 {
						t.Fatalf("B's relay range %d-%d overlaps A's", b.cfg.Relay.MinPort, b.cfg.Relay.MaxPort)
					}
				}
			})
			newPionClient(t, a, testUser, testPassword).allocate(t)
			if tc.drain {
				a.signal(t, syscall.SIGTERM)
				testenv.Eventually(t, 5*time.Second, func() error {
					if a.ready() == nil {
						return fmt.Errorf("A still ready after SIGTERM")
					}
					return nil
				})
			}
			urls := turnURLs(a)
			cfg := testenv.PageConfig{
				ICEServers: []testenv.ICEServer{{URLs: urls, Username: testUser, Credential: testPassword}},
				Messages:   chromiumMessages, GatherMs: 20000, ConnectMs: 20000,
			}
			res := testenv.RunChromium(t, cfg).Result
			if v, _ := a.metric(t, "stunner_allocations_active"); v != 1 {
				t.Errorf("A: stunner_allocations_active = %v, want 1 (pion's)", v)
			}
			if a.exited() {
				t.Fatalf("A exited while it held an allocation: %v", a.waitErr)
			}
			if !tc.alternate {
				if res.Connected || res.Gathered["a"] != 0 || len(res.Candidates) != 0 {
					t.Fatalf("call through A at capacity with no alternate: connected %v, candidates %+v; want none", res.Connected, res.Candidates)
				}
				for _, u := range urls {
					found := false
					for _, e := range res.ICEErrors {
						found = found || (e.URL == u && e.ErrorCode == 508)
					}
					if !found {
						t.Errorf("no icecandidateerror 508 from %s; got %+v", u, res.ICEErrors)
					}
				}
				if v, _ := a.metric(t, `tern_allocation_errors_total{code="508"}`); v < float64(len(urls)) {
					t.Errorf(`A: tern_allocation_errors_total{code="508"} = %v, want at least %d`, v, len(urls))
				}
				if v, _ := a.metric(t, "tern_redirects_total"); v != 0 {
					t.Errorf("A: tern_redirects_total = %v with no alternate, want 0", v)
				}
				return
			}
			checkRelayed(t, res, b)
			// Each peer connection's Allocate over each URI of A's was
			// redirected, and allocated at B.
			for _, pc := range []string{"a", "b"} {
				for _, u := range urls {
					found := false
					for _, c := range res.Candidates {
						found = found || (c.PC == pc && c.URL == u)
					}
					if !found {
						t.Errorf("peer connection %s gathered no relay candidate through %s", pc, u)
					}
				}
			}
			// libwebrtc names the URI it was given, A's, as the server of
			// a candidate it allocated at the alternate.
			if u := res.Pair.Local.URL; !slices.Contains(urls, u) {
				t.Errorf("selected local candidate's url %q, want one of A's %v", u, urls)
			}
			// A followed redirect is no ICE error.
			if len(res.ICEErrors) != 0 {
				t.Errorf("icecandidateerror events %+v, want none", res.ICEErrors)
			}
			want := float64(2 * len(urls))
			redirects, _ := a.metric(t, `tern_redirects_total{reason="`+tc.reason+`"}`)
			if redirects < want {
				t.Errorf(`A: tern_redirects_total{reason=%q} = %v, want at least %v`, tc.reason, redirects, want)
			}
			allocs, _ := b.metric(t, "stunner_allocations_active")
			if allocs < want {
				t.Errorf("B: stunner_allocations_active = %v during the call, want at least %v", allocs, want)
			}
			t.Logf(`A: tern_redirects_total{reason=%q} = %v; B: stunner_allocations_active = %v`, tc.reason, redirects, allocs)
		})
	}
}
