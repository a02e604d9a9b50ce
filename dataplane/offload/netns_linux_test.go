package offload

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

// The namespaces, veths and addresses here exist only inside network
// namespaces the tests create and remove; nothing on the host changes.

var nsSeq atomic.Int32

// requireRoot skips (or, under CI, fails) a test that needs root and ip(8).
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "offload tests need root (network namespaces, BPF)")
	}
	_, err := exec.LookPath("ip")
	testenv.Require(t, "ip (iproute2)", err)
}

// uniq returns a name prefix unique to this process and call, short
// enough for interface names (15 bytes).
func uniq() string {
	return fmt.Sprintf("t%d%d", os.Getpid()%100000, nsSeq.Add(1))
}

// newNetns creates a network namespace with lo up, removed in t.Cleanup.
func newNetns(t testing.TB, name string) string {
	t.Helper()
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// run runs a command and fails the test with its output if it fails.
func run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// inNetns runs fn on an OS thread switched into the named namespace.
// Sockets fn opens and BPF links it attaches stay in that namespace.
func inNetns(t testing.TB, name string, fn func() error) error {
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

// xdpPass attaches tern_xdp_pass to ifname in ns until the test ends.
func xdpPass(t testing.TB, ns, ifname string) {
	t.Helper()
	var objs ternObjects
	if err := loadObjects(&objs); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	err := inNetns(t, ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: objs.TernXdpPass, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	if err != nil {
		t.Fatalf("XDP pass on %s: %v", ifname, err)
	}
}
