package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-gw/tern/internal/testenv"
)

// stunnerdConf is stunnerd's own config file (STUNner's v1 format, as its
// operator renders it): the listener binds $STUNNER_ADDR, the cluster's
// endpoints are the second verb, the health check port the third.
const stunnerdConf = `version: v1
admin:
  name: stunner/udp-gateway
  loglevel: all:WARN
  healthcheck_endpoint: http://127.0.0.1:%[3]d
auth:
  type: plaintext
  realm: stunner.l7mp.io
  credentials:
    username: user
    password: pass
listeners:
  - name: stunner/udp-gateway/udp-listener
    protocol: TURN-UDP
    address: $STUNNER_ADDR
    port: %[1]d
    routes: [stunner/media-plane]
clusters:
  - name: stunner/media-plane
    type: STATIC
    endpoints: %[2]s
`

// TestStunnerdArgsAndConfig runs ternd as a STUNner Dataplane runs
// stunnerd: stunnerd's arguments (-w, --udp-thread-num, --log-format json,
// per-scope -l, -c file://...) on stunnerd's own config file. A pion/turn
// client relays to the peer the cluster allows and is refused another; an
// edit of the file is applied live; the log is JSON at the level the
// command line asked for (turn:DEBUG beats the file's all:WARN).
func TestStunnerdArgsAndConfig(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not take stunnerd's arguments")
	}
	port, release := freePort(t, "udp4")
	release()
	healthPort, releaseHealth := freePort(t, "tcp4")
	releaseHealth()
	path := filepath.Join(t.TempDir(), "stunnerd.conf")
	write := func(endpoints string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, stunnerdConf, port, endpoints, healthPort), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("[127.0.0.1/32]")

	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, healthURL: fmt.Sprintf("http://127.0.0.1:%d", healthPort)}
	cmd := exec.Command(terndBinary(t), "-w", "--udp-thread-num=16", "--log-format", "json",
		"-l", "all:INFO,turn:DEBUG,ice:TRACE", "--dry-run", "-c", "file://"+path)
	cmd.Env = append(os.Environ(), "STUNNER_ADDR=127.0.0.1")
	s.start(t, cmd)
	testenv.Eventually(t, readyTimeout, func() error {
		if s.exited() {
			t.Fatalf("ternd exited: %v", s.waitErr)
		}
		return s.ready()
	})

	c, _, _, _ := relayAcrossAllowlistEdit(t, s, "the cluster", write)
	c.assertQuiet(t)

	// Every line is JSON; the ignored flag and the unknown scope are said
	// once; debug lines are there.
	var ignored, unknown, debug int
	for line := range strings.SplitSeq(strings.TrimSpace(s.out.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		switch {
		case strings.HasPrefix(rec.Msg, "ignoring stunnerd flag --dry-run"):
			ignored++
		case strings.Contains(rec.Msg, "no loggers for these scopes"):
			unknown++
		}
		if rec.Level == "DEBUG" {
			debug++
		}
	}
	if ignored != 1 || unknown != 1 || debug == 0 {
		t.Errorf("log: %d --dry-run lines, %d unknown-scope lines, %d debug lines; want 1, 1, some", ignored, unknown, debug)
	}
}
