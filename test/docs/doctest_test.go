package docs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// repoRoot is where the blocks run, so the paths they name (bin/,
// deploy/examples/...) resolve as in the docs.
const repoRoot = "../.."

// docFiles are the Markdown files whose marked blocks are run.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, files...)
}

// TestDocBlocks runs every marked command block of README.md and
// docs/*.md, in order, as written, with bash in the repository root, and
// checks what its marker expects (docs/README.md, "Tested command
// blocks"). Blocks run one at a time: the README's use fixed ports.
func TestDocBlocks(t *testing.T) {
	bash, err := exec.LookPath("bash")
	testenv.Require(t, "bash", err)
	var blocks []Block
	for _, file := range docFiles(t) {
		bs, err := Blocks(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	// One ternd for every block that serves with one, built here so that
	// it outlives each block's subtest.
	var ternd string
	for _, b := range blocks {
		if b.Ternd != "" && b.Skip == "" && !b.Cluster {
			ternd = testenv.Ternd(t)
			break
		}
	}
	for _, b := range blocks {
		rel, _ := filepath.Rel(repoRoot, b.File)
		t.Run(fmt.Sprintf("%s:%d", rel, b.Line), func(t *testing.T) {
			if b.Skip != "" {
				t.Skipf("not run here: %s", b.Skip)
			}
			if b.Cluster {
				t.Skip("run on the real-node cluster by TestDocBlocksOnCluster (test/cluster)")
			}
			if b.Root && os.Geteuid() != 0 {
				testenv.SkipOrFail(t, "the block needs root")
			}
			for _, c := range b.Needs {
				_, err := exec.LookPath(c)
				testenv.Require(t, c+" (hack/test-deps.sh installs the test tools)", err)
			}
			for _, p := range b.Ports {
				proto, port, _ := strings.Cut(p, ":")
				requireFree(t, proto, net.JoinHostPort("127.0.0.1", port), "the block binds it")
			}
			if b.Ternd != "" {
				startTernd(t, ternd, b.Ternd)
			}
			runBlock(t, bash, b)
		})
	}
	// The README's "Try it" is marked: a refactor that drops every marker
	// must not turn this test into a silent pass.
	if len(blocks) == 0 {
		t.Fatal("no marked command blocks found in README.md and docs/*.md")
	}
}

// runBlock runs b's script with bash and checks its exit status and
// output, once more when b.RetryIf matches a failure.
func runBlock(t *testing.T, bash string, b Block) {
	t.Helper()
	out, err := runScript(t, bash, b)
	if failed(out, err, b) && b.RetryIf != "" && strings.Contains(out, b.RetryIf) {
		t.Logf("the block failed with %q in its output; its marker allows one more run. First output:\n%s", b.RetryIf, out)
		out, err = runScript(t, bash, b)
	}
	if err != nil {
		t.Fatalf("bash exited with %v; output:\n%s", err, out)
	}
	for _, want := range b.Expect {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q, which the doc's marker promises; output:\n%s", want, out)
		}
	}
	if !t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func failed(out string, err error, b Block) bool {
	if err != nil {
		return true
	}
	for _, want := range b.Expect {
		if !strings.Contains(out, want) {
			return true
		}
	}
	return false
}

// epilogue ends the script: it keeps the block's exit status and stops,
// by PID, the jobs the block left in the background (the README starts
// turnutils_peer with &).
const epilogue = `
__doctest_rc=$?
for __doctest_pid in $(jobs -p); do kill "$__doctest_pid" 2>/dev/null; done
wait 2>/dev/null
exit "$__doctest_rc"
`

// runScript runs b.Script as written, then the epilogue, in a process
// group of its own; whatever of that group is still alive when bash ends
// or b.Timeout passes is killed by the group's id, so no process the block
// started outlives the test.
func runScript(t *testing.T, bash string, b Block) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-c", b.Script+epilogue)
	cmd.Dir = repoRoot
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var buf testenv.LockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH when all are gone
	}
	if ctx.Err() != nil {
		return buf.String(), fmt.Errorf("still running after %v", b.Timeout)
	}
	return buf.String(), err
}

// startTernd runs bin with the config file cfg (relative to the
// repository root) until t ends, after checking that every port the config
// binds is free (a busy port fails the test, naming it), and waits until
// its health endpoint says ready.
func startTernd(t *testing.T, bin, cfg string) {
	t.Helper()
	path := filepath.Join(repoRoot, cfg)
	c, err := config.Load(path, os.Getenv)
	if err != nil {
		t.Fatalf("the block's ternd config: %v", err)
	}
	why := "ternd serves it with " + cfg
	for _, l := range c.Listeners {
		proto := "tcp"
		if l.Protocol == protocol.TURNUDP || l.Protocol == protocol.TURNDTLS {
			proto = "udp"
		}
		requireFree(t, proto, net.JoinHostPort(l.Address, strconv.Itoa(l.Port)), why)
	}
	for _, a := range []string{c.Admin.MetricsAddress, c.Admin.HealthAddress} {
		if a != "" {
			requireFree(t, "tcp", a, why)
		}
	}
	if c.Admin.HealthAddress == "" {
		t.Fatalf("%s has no admin.healthAddress: the test cannot tell when ternd is ready", cfg)
	}
	var log testenv.LockedBuffer
	cmd := exec.Command(bin, "-c", path)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // Ctrl-C, as make run is stopped
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("ternd's log:\n%s", log.String())
		}
	})
	ready := "http://" + c.Admin.HealthAddress + "/ready"
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("ternd -c %s exited: %v\n%s", cfg, err, log.String())
		default:
		}
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ternd -c %s: %s not 200 after 20 s\n%s", cfg, ready, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// requireFree fails t when addr cannot be bound on proto: the doc's
// commands use fixed ports, and a test that ran them against whatever
// holds the port would test that instead.
func requireFree(t *testing.T, proto, addr, why string) {
	t.Helper()
	var err error
	switch proto {
	case "udp":
		var c net.PacketConn
		if c, err = net.ListenPacket("udp", addr); err == nil {
			c.Close()
		}
	default:
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			l.Close()
		}
	}
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.EADDRINUSE) {
			hint = fmt.Sprintf("; another process holds it (ss -lnp%s 'sport = :%s' names it): stop it and run again",
				map[string]string{"udp": "u", "tcp": "t"}[proto], addr[strings.LastIndex(addr, ":")+1:])
		}
		t.Fatalf("%s port %s is not free (%s): %v%s", proto, addr, why, err, hint)
	}
}
