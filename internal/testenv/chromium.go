package testenv

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Chromium's libwebrtc as a TURN client, for test/e2e and test/cluster: a page
// (chromium_page.html) with two relay-only RTCPeerConnections calls itself
// through the TURN servers of its PageConfig, a data channel echoes
// PageConfig.Messages messages, and the page POSTs what happened (PageResult).

//go:embed chromium_page.html
var chromiumPage []byte

// ICEServer is an RTCIceServer of the page's RTCConfiguration.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username"`
	Credential string   `json:"credential"`
}

// PageConfig is what the page reads: its ICE servers, how many messages to
// echo, and its bounds in milliseconds for ICE gathering and for the data
// channel to open (and the echoes to return).
type PageConfig struct {
	ICEServers []ICEServer `json:"iceServers"`
	Messages   int         `json:"messages"`
	GatherMs   int         `json:"gatherMs"`
	ConnectMs  int         `json:"connectMs"`
}

// CandidateStats is an RTCIceCandidateStats of the selected pair.
type CandidateStats struct {
	Address       string `json:"address"`
	Port          int    `json:"port"`
	CandidateType string `json:"candidateType"`
	Protocol      string `json:"protocol"`
	RelayProtocol string `json:"relayProtocol"` // client to TURN server: udp, tcp or tls
	URL           string `json:"url"`           // the TURN server that allocated it
}

// PairStats is the selected candidate pair of one RTCPeerConnection.
type PairStats struct {
	Local     *CandidateStats `json:"local"`
	Remote    *CandidateStats `json:"remote"`
	State     string          `json:"state"`
	Nominated bool            `json:"nominated"`
}

// ICEError is an RTCPeerConnectionIceErrorEvent: for a TURN server, the STUN
// error code of the Allocate that failed (or 701 when there was no answer)
// and the server's URL.
type ICEError struct {
	PC        string `json:"pc"`
	ErrorCode int    `json:"errorCode"`
	ErrorText string `json:"errorText"`
	URL       string `json:"url"`
	Address   string `json:"address"`
	Port      int    `json:"port"`
}

// PageCandidate is a candidate one side gathered: pc is "a" (the offerer)
// or "b", url the TURN server it came from.
type PageCandidate struct {
	PC        string `json:"pc"`
	Candidate string `json:"candidate"`
	URL       string `json:"url"`
}

// PageResult is what the page POSTs once the echoes are back (or the call
// failed, Error saying why).
type PageResult struct {
	Connected  bool            `json:"connected"`
	Sent       int             `json:"sent"`
	Echoed     int             `json:"echoed"`
	Candidates []PageCandidate `json:"candidates"`
	ICEErrors  []ICEError      `json:"iceErrors"`
	Gathered   map[string]int  `json:"gathered"` // candidates in each side's SDP
	Pair       *PairStats      `json:"pair"`     // the offerer's selected pair
	PairB      *PairStats      `json:"pairB"`    // the answerer's
	Error      string          `json:"error"`
	UserAgent  string          `json:"userAgent"`
}

// ChromiumBound is how long RunChromium waits from Chromium's start to the
// page's result, and HangUp for the page to close its peer connections.
const ChromiumBound = 60 * time.Second

// ChromiumBinary returns the path of Debian's chromium, or skips the test
// (fails it under CI).
func ChromiumBinary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	Require(t, "chromium (hack/test-deps.sh installs Debian's chromium)", err)
	return path
}

// ChromiumCall is a page RunChromium opened, its call still up.
type ChromiumCall struct {
	// Result is what the page POSTed.
	Result PageResult

	hangup chan struct{}
	closed chan struct{}
	once   sync.Once
}

// HangUp has the page close both peer connections (libwebrtc then releases
// their TURN allocations with a Refresh of lifetime 0, RFC 8656 §7) and
// waits up to ChromiumBound for the page to say it did. Without it the call
// stays up until the test ends, when Chromium is killed and its
// allocations are left to expire.
func (c *ChromiumCall) HangUp(t testing.TB) {
	t.Helper()
	c.once.Do(func() { close(c.hangup) })
	select {
	case <-c.closed:
	case <-time.After(ChromiumBound):
		t.Fatalf("the page did not close its peer connections within %v of the hang-up", ChromiumBound)
	}
}

// RunChromium serves the page with cfg from an httptest server on
// 127.0.0.1, opens it in headless Chromium (--no-sandbox: the tests run as
// root) and returns the call once the page POSTed its result, which is
// logged. Chromium keeps running, the call up, until HangUp or the test's
// end, when its process group is killed; its output is logged if the test
// failed.
func RunChromium(t testing.TB, cfg PageConfig) *ChromiumCall {
	t.Helper()
	bin := ChromiumBinary(t)
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	page := bytes.Replace(chromiumPage, []byte("/*CONFIG*/null"), raw, 1)
	call := &ChromiumCall{hangup: make(chan struct{}), closed: make(chan struct{})}
	results := make(chan PageResult, 1)
	var closedOnce sync.Once
	stop := make(chan struct{}) // the test ends: /hangup returns, so the server can close
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("POST /result", func(w http.ResponseWriter, r *http.Request) {
		var res PageResult
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&res); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case results <- res:
		default:
		}
	})
	mux.HandleFunc("GET /hangup", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-call.hangup:
		case <-stop:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /closed", func(http.ResponseWriter, *http.Request) {
		closedOnce.Do(func() { close(call.closed) })
	})
	srv := httptest.NewServer(mux) // on 127.0.0.1
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before srv.Close, which waits for /hangup

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
		"--enable-logging=stderr", "--vmodule=*/p2p/base/turn_port*=1", "--user-data-dir="+t.TempDir(), srv.URL+"/")
	// Its own process group: Chromium forks a zygote, renderers and utility
	// processes, and the cleanup kills them all by the group's id.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out := &LockedBuffer{}
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
	case call.Result = <-results:
		js, _ := json.MarshalIndent(call.Result, "", "  ")
		t.Logf("page result:\n%s", js)
		return call
	case <-exited:
		t.Fatalf("chromium exited before the page posted its result")
	case <-time.After(ChromiumBound):
		t.Fatalf("the page posted no result within %v", ChromiumBound)
	}
	return nil
}
