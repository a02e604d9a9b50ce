//go:build cluster

package cluster

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// kedaChromiumMessages is how many data channel messages Chromium's page sends and expects
// echoed in TestKEDAScaling's Chromium step.
const kedaChromiumMessages = 100

// kedaChromium is TestKEDAScaling's Chromium step, after the scale-out and the redirects:
// headless Chromium (testenv's page: two relay-only RTCPeerConnections in one page, a data
// channel echo), in the control plane's network namespace where the test runs, is given only
// the first replica's TURN URI. The first replica holds more than its share, so it answers
// each of the page's two Allocates with 300 Try Alternate and libwebrtc allocates at the
// alternate, another replica on another node. The call connects relay to relay (each
// allocation's peer is the other's relayed transport address, a node's address, which the
// Gateway's UDPRoute opens through the StaticService of kedaManifests), every message comes
// back, and the first replica gains no allocation. Hung up, the page closes its peer
// connections and libwebrtc releases both allocations (Refresh with lifetime 0), so the
// replicas are back to the allocations of the other clients. Which replicas relayed, the
// messages and the times are logged.
func kedaChromium(t *testing.T, first pod, replicas []pod) {
	testenv.ChromiumBinary(t)
	byIP := map[string]pod{}
	for _, p := range replicas {
		byIP[p.ip] = p
	}
	allocations := func() (map[string]uint64, uint64) {
		t.Helper()
		per := map[string]uint64{}
		var total uint64
		for _, p := range replicas {
			n, err := scrapeSample(kedaMetrics(p), "stunner_allocations_active")
			if err != nil {
				t.Fatal(err)
			}
			per[p.node] = n
			total += n
		}
		return per, total
	}
	redirects := func() uint64 {
		t.Helper()
		n, err := scrapeSample(kedaMetrics(first), `tern_redirects_total{reason="imbalance"}`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	perBefore, before := allocations()
	redirectsBefore := redirects()

	url := "turn:" + kedaServer(first) + "?transport=udp"
	start := time.Now()
	call := testenv.RunChromium(t, testenv.PageConfig{
		ICEServers: []testenv.ICEServer{{URLs: []string{url}, Username: turnUser, Credential: turnPass}},
		Messages:   kedaChromiumMessages, GatherMs: 30000, ConnectMs: 30000,
	})
	elapsed := time.Since(start)
	res := call.Result
	if res.Error != "" || !res.Connected {
		t.Fatalf("Chromium's call through %s did not connect: %q (ICE errors %+v)", url, res.Error, res.ICEErrors)
	}
	if res.Sent != kedaChromiumMessages || res.Echoed != kedaChromiumMessages {
		t.Errorf("Chromium sent %d and got %d data channel messages echoed, want %d of %d", res.Sent, res.Echoed, kedaChromiumMessages, kedaChromiumMessages)
	}
	// A followed redirect is no ICE error.
	if len(res.ICEErrors) != 0 {
		t.Errorf("icecandidateerror events %+v, want none", res.ICEErrors)
	}
	// Both ends of both sides' selected pairs are relayed transport addresses of replicas
	// other than the first: a node's address, a port of the relay range.
	var relayedBy []string
	for _, side := range []struct {
		name string
		pair *testenv.PairStats
	}{{"offerer", res.Pair}, {"answerer", res.PairB}} {
		p := side.pair
		if p == nil || p.Local == nil || p.Remote == nil {
			t.Fatalf("%s: no selected candidate pair in getStats()", side.name)
		}
		for _, end := range []struct {
			name string
			c    *testenv.CandidateStats
		}{{"local", p.Local}, {"remote", p.Remote}} {
			c := end.c
			r, ok := byIP[c.Address]
			if c.CandidateType != "relay" || !ok || r.name == first.name || c.Port < kedaRelayMin || c.Port > kedaRelayMax {
				t.Errorf("%s's %s candidate %s %s:%d, want a relay candidate of a replica other than the first (%v) in %d-%d",
					side.name, end.name, c.CandidateType, c.Address, c.Port, first, kedaRelayMin, kedaRelayMax)
				continue
			}
			if end.name == "local" {
				relayedBy = append(relayedBy, fmt.Sprintf("%s on %s (%s)", side.name, r.node, net.JoinHostPort(c.Address, strconv.Itoa(c.Port))))
			}
		}
	}
	perDuring, during := allocations()
	if perDuring[first.node] != perBefore[first.node] {
		t.Errorf("first replica %v: stunner_allocations_active %d during the call, %d before; want no allocation of Chromium's there",
			first, perDuring[first.node], perBefore[first.node])
	}
	if during < before+2 {
		t.Errorf("the replicas hold %d allocations during the call, %d before; want Chromium's two more", during, before)
	}
	redirected := redirects() - redirectsBefore
	if redirected < 2 {
		t.Errorf(`first replica %v: tern_redirects_total{reason="imbalance"} rose by %d during the call, want at least 2 (one per peer connection)`, first, redirected)
	}

	hangup := time.Now()
	call.HangUp(t)
	testenv.Eventually(t, 60*time.Second, func() error {
		if _, n := allocations(); n != before {
			return fmt.Errorf("the replicas hold %d allocations after the hang-up, want the %d from before the call", n, before)
		}
		return nil
	})
	t.Logf("Chromium (%s) at %s: redirected (first's imbalance redirects +%d), relayed by %s; call up and %d of %d data channel messages echoed %.1fs after Chromium's start; allocations per node %v before, %v during; both released %.1fs after the hang-up",
		chromeVersion(res.UserAgent), url, redirected, strings.Join(relayedBy, ", "),
		res.Echoed, kedaChromiumMessages, elapsed.Seconds(), perBefore, perDuring, time.Since(hangup).Seconds())
}

// chromeVersion returns the Chrome/ or HeadlessChrome/ token of a user agent, or "".
func chromeVersion(ua string) string {
	for _, f := range strings.Fields(ua) {
		if strings.HasPrefix(f, "HeadlessChrome/") || strings.HasPrefix(f, "Chrome/") {
			return f
		}
	}
	return ""
}
