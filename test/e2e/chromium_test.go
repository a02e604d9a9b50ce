package e2e

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// Chromium's libwebrtc as a TURN client: a page with two relay-only
// RTCPeerConnections calls itself through ternd, and the tests check where
// the relayed transport addresses were allocated.

//go:embed chromium_page.html
var chromiumPage []byte

const (
	chromiumMessages = 100              // data channel messages the page sends and expects echoed
	chromiumBound    = 60 * time.Second // start of Chromium to the page's POST
)

// iceServer is an RTCIceServer of the page's RTCConfiguration.
type iceServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username"`
	Credential string   `json:"credential"`
}

// pageConfig is what the page reads: its ICE servers, how many messages
// to echo, and its bounds in milliseconds for ICE gathering and for the
// data channel to open (and the echoes to return).
type pageConfig struct {
	ICEServers []iceServer `json:"iceServers"`
	Messages   int         `json:"messages"`
	GatherMs   int         `json:"gatherMs"`
	ConnectMs  int         `json:"connectMs"`
}

// candidateStats is an RTCIceCandidateStats of the selected pair.
type candidateStats struct {
	Address       string `json:"address"`
	Port          int    `json:"port"`
	CandidateType string `json:"candidateType"`
	Protocol      string `json:"protocol"`
	RelayProtocol string `json:"relayProtocol"` // client to TURN server: udp, tcp or tls
	URL           string `json:"url"`           // the TURN server that allocated it
}

// pairStats is the selected candidate pair of one RTCPeerConnection.
type pairStats struct {
	Local     *candidateStats `json:"local"`
	Remote    *candidateStats `json:"remote"`
	State     string          `json:"state"`
	Nominated bool            `json:"nominated"`
}

// iceError is an RTCPeerConnectionIceErrorEvent: for a TURN server, the
// STUN error code of the Allocate that failed (or 701 when there was no
// answer) and the server's URL.
type iceError struct {
	PC        string `json:"pc"`
	ErrorCode int    `json:"errorCode"`
	ErrorText string `json:"errorText"`
	URL       string `json:"url"`
	Address   string `json:"address"`
	Port      int    `json:"port"`
}

// pageResult is what the page POSTs.
type pageResult struct {
	Connected  bool `json:"connected"`
	Sent       int  `json:"sent"`
	Echoed     int  `json:"echoed"`
	Candidates []struct {
		PC        string `json:"pc"`
		Candidate string `json:"candidate"`
		URL       string `json:"url"`
	} `json:"candidates"`
	ICEErrors []iceError     `json:"iceErrors"`
	Gathered  map[string]int `json:"gathered"` // candidates in each side's SDP
	Pair      *pairStats     `json:"pair"`     // the offerer's selected pair
	PairB     *pairStats     `json:"pairB"`    // the answerer's
	Error     string         `json:"error"`
	UserAgent string         `json:"userAgent"`
}

// chromiumBinary returns Debian's chromium, or skips (fails under CI).
func chromiumBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	testenv.Require(t, "chromium (hack/test-deps.sh installs Debian's chromium)", err)
	return path
}

// runChromium serves the page with cfg from an httptest server on
// 127.0.0.1, opens it in headless Chromium and returns what the page
// POSTed. Chromium keeps running (the call stays up) until the test ends,
// when its process group is killed.
func runChromium(t *testing.T, cfg pageConfig) pageResult {
	t.Helper()
	bin := chromiumBinary(t)
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	page := bytes.Replace(chromiumPage, []byte("/*CONFIG*/null"), raw, 1)
	results := make(chan pageResult, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("POST /result", func(w http.ResponseWriter, r *http.Request) {
		var res pageResult
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&res); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case results <- res:
		default:
		}
	})
	srv := httptest.NewServer(mux) // on 127.0.0.1
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), chromiumBound+10*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
		"--user-data-dir="+t.TempDir(), srv.URL+"/")
	// Its own process group: Chromium forks a zygote, renderers and
	// utility processes, and the cleanup kills them all by the group's id.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("chromium output:\n%s", out.String())
		}
	})
	select {
	case res := <-results:
		js, _ := json.MarshalIndent(res, "", "  ")
		t.Logf("page result:\n%s", js)
		return res
	case <-exited:
		t.Fatalf("chromium exited before the page posted its result")
	case <-time.After(chromiumBound):
		t.Fatalf("the page posted no result within %v", chromiumBound)
	}
	return pageResult{}
}

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
func checkRelayed(t *testing.T, res pageResult, s *server) {
	t.Helper()
	if res.Error != "" || !res.Connected {
		t.Fatalf("the call did not connect: %q (ICE errors %+v)", res.Error, res.ICEErrors)
	}
	if res.Echoed != chromiumMessages || res.Sent != chromiumMessages {
		t.Fatalf("sent %d, echoed %d messages, want %d", res.Sent, res.Echoed, chromiumMessages)
	}
	for side, p := range map[string]*pairStats{"offerer": res.Pair, "answerer": res.PairB} {
		if p == nil || p.Local == nil || p.Remote == nil {
			t.Fatalf("%s: no selected candidate pair in getStats()", side)
		}
		for end, c := range map[string]*candidateStats{"local": p.Local, "remote": p.Remote} {
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
// each; the UDP one is preferred), once with the TURN-TCP URI alone. The
// selected pairs are relay to relay in ternd's range, over the transport
// to ternd the case wants, and ternd counts the allocations.
func TestChromiumRelay(t *testing.T) {
	chromiumBinary(t)
	s := startTernd(t, withTCP)
	urls := turnURLs(s)
	if len(urls) != 2 {
		t.Fatalf("ternd's TURN URIs %v, want UDP and TCP", urls)
	}
	for _, tc := range []struct {
		name     string
		urls     []string
		selected string // relayProtocol of the selected pair's local candidates
	}{
		{"udp+tcp", urls, "udp"},
		{"tcp", urls[1:], "tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.metric(t, "stunner_allocations_active")
			res := runChromium(t, pageConfig{
				ICEServers: []iceServer{{URLs: tc.urls, Username: testUser, Credential: testPassword}},
				Messages:   chromiumMessages, GatherMs: 20000, ConnectMs: 20000,
			})
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
			for side, p := range map[string]*pairStats{"offerer": res.Pair, "answerer": res.PairB} {
				if p.Local.RelayProtocol != tc.selected {
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
