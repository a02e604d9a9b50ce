//go:build linux

// Package netnstest gives tests network namespaces of their own: created
// with ip(8), removed when the test ends, and entered by one OS thread at
// a time (In). The namespaces, veths and addresses a test makes in them
// exist only there; nothing on the host changes. Tests that use it need
// root and iproute2 (RequireRoot skips without them, or fails under CI).
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

var seq atomic.Int32

// RequireRoot skips (or, under CI, fails) a test that needs root and ip(8).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "network namespace tests need root (network namespaces, BPF)")
	}
	_, err := exec.LookPath("ip")
	testenv.Require(t, "ip (iproute2)", err)
}

// Uniq returns a name prefix unique to this process and call, short
// enough for interface names (15 bytes).
func Uniq() string {
	return fmt.Sprintf("t%d%d", os.Getpid()%100000, seq.Add(1))
}

// New creates a network namespace with lo up, removed in t.Cleanup, and
// returns its name.
func New(t testing.TB, name string) string {
	t.Helper()
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// In runs fn on an OS thread switched into the named namespace and
// returns fn's error, or why the switch failed. Sockets fn opens and BPF
// links it attaches stay in that namespace.
func In(t testing.TB, name string, fn func() error) error {
	if t != nil {
		t.Helper()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if switching back fails it must
		// die with the goroutine rather than run others in the namespace.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		f, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
