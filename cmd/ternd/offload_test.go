package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/internal/testenv"
)

// Ports of these tests: listener 24610, admin 24611-24612, relays
// 24620-24639 on 127.0.99.1, peer 24640.
const offloadTestConfig = `version: v1
admin: {name: offload-test, metricsAddress: "127.0.0.1:24611", healthAddress: "127.0.0.1:24612"}
auth: {type: static, realm: stunner.l7mp.io, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: 127.0.0.1, port: 24610, routes: [local]}
clusters:
  - {name: local, endpoints: ["127.0.0.1/32"]}
relay: {address: 127.0.99.1, minPort: 24620, maxPort: 24639}
`

// unprivilegedTernd starts ternd with args as uid/gid 65534 with no
// capabilities, so that bpf() is refused, from a copy of the binary and a
// config in a directory that user can read. It returns the command and its
// stderr.
func unprivilegedTernd(t *testing.T, args ...string) (*exec.Cmd, *testenv.LockedBuffer) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "offload fallback test: needs root to run ternd as an unprivileged user")
	}
	bin := testenv.Ternd(t)
	dir, err := os.MkdirTemp("", "tern-offload-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "ternd")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tern.yaml")
	if err := os.WriteFile(cfg, []byte(offloadTestConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, exe, append([]string{"-c", cfg, "--udp-thread-num=1", "--relay-thread-num=1", "--grace-period=0s"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	cmd.Stdout = io.Discard
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stderr
}

// noCapabilities checks that pid runs without effective capabilities.
func noCapabilities(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok && strings.TrimSpace(v) != "0000000000000000" {
			t.Fatalf("ternd runs with capabilities %s", strings.TrimSpace(v))
		}
	}
}

// TestOffloadAutoFallsBackUnprivileged: ternd --offload-engine Auto run
// by an unprivileged user, where BPF is refused, serves and relays
// through sockets, says why in one log line, and reports the fallback in
// /metrics.
func TestOffloadAutoFallsBackUnprivileged(t *testing.T) {
	cmd, stderr := unprivilegedTernd(t, "--offload-engine", "Auto")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	testenv.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get("http://127.0.0.1:24612/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/ready: %s", resp.Status)
		}
		return nil
	})
	noCapabilities(t, cmd.Process.Pid)

	peer, err := net.ListenPacket("udp4", "127.0.0.1:24640")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := peer.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = peer.WriteTo(buf[:n], from)
		}
	}()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: "127.0.0.1:24610", TURNServerAddr: "127.0.0.1:24610",
		Username: "user", Password: "pass", Realm: "stunner.l7mp.io", Conn: conn, RTO: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := c.Allocate()
	if err != nil {
		t.Fatalf("allocate: %v\n%s", err, stderr)
	}
	defer relay.Close()
	if ip := relay.LocalAddr().(*net.UDPAddr).IP.String(); ip != "127.0.99.1" {
		t.Errorf("relayed address %s", relay.LocalAddr())
	}
	buf := make([]byte, 1500)
	const n = 50
	for i := range n {
		want := fmt.Sprintf("unprivileged echo %d", i)
		if _, err := relay.WriteTo([]byte(want), peer.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		_ = relay.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, _, err := relay.ReadFrom(buf)
		if err != nil || string(buf[:k]) != want {
			t.Fatalf("echo %d: %q, %v", i, buf[:k], err)
		}
	}

	logs := stderr.String()
	if k := strings.Count(logs, "offload unavailable, relaying through sockets"); k != 1 {
		t.Errorf("fallback logged %d times:\n%s", k, logs)
	}
	resp, err := http.Get("http://127.0.0.1:24611/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `tern_offload_active{requested="Auto",attached="None",interface="",reason="NoInterface"} 0`) {
		t.Errorf("no fallback in /metrics:\n%s", grepLines(string(body), "tern_offload"))
	}
	// What tern-operator reads for the Gateway's OffloadActive condition.
	resp, err = http.Get("http://127.0.0.1:24612" + offloadmode.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep offloadmode.Report
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Active || rep.Requested != offloadmode.Auto || rep.Attached != offloadmode.None ||
		rep.Reason != offloadmode.ReasonNoInterface || rep.Message == "" {
		t.Errorf("%s: %+v", offloadmode.ReportPath, rep)
	}
	t.Logf("fallback line: %s", grepLines(logs, `msg="offload`))
}

// TestOffloadXDPFailsUnprivileged: ternd --offload-engine XDP where BPF is
// refused exits with an error naming the engine, instead of serving
// without the fast path it was told to use.
func TestOffloadXDPFailsUnprivileged(t *testing.T) {
	cmd, stderr := unprivilegedTernd(t, "--offload-engine", "XDP")
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\n%s", err, stderr)
	}
	logs := stderr.String()
	if !strings.Contains(logs, "offload engine XDP") {
		t.Errorf("error does not name the engine:\n%s", logs)
	}
	t.Logf("error line: %s", grepLines(logs, "offload engine"))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
