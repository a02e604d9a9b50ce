package testenv

import "testing"

// TestRunChromiumHangUp runs the page with no ICE server: relay-only, it
// gathers no candidate, posts a call that did not connect, and closes its
// peer connections when hung up.
func TestRunChromiumHangUp(t *testing.T) {
	call := RunChromium(t, PageConfig{ICEServers: []ICEServer{}, Messages: 1, GatherMs: 20000, ConnectMs: 20000})
	res := call.Result
	if res.Connected || res.Gathered["a"] != 0 || len(res.Candidates) != 0 || res.Error != "" {
		t.Fatalf("page with no ICE server: connected %v, gathered %v, candidates %+v, error %q; want no candidate and no error",
			res.Connected, res.Gathered, res.Candidates, res.Error)
	}
	if res.UserAgent == "" {
		t.Error("the page posted no user agent")
	}
	call.HangUp(t)
}
