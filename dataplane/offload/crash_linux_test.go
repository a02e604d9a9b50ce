package offload

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tern-gw/tern/internal/testenv"
)

// crashChildEnv names the namespace a re-executed test binary opens the
// offload in before it waits to be killed.
const crashChildEnv = "TERN_OFFLOAD_CRASH_CHILD_NETNS"

func TestMain(m *testing.M) {
	if ns := os.Getenv(crashChildEnv); ns != "" {
		crashChild(ns)
		return
	}
	os.Exit(m.Run())
}

// crashChild opens the offload on lo in namespace ns, says so on stdout
// and waits for SIGKILL.
func crashChild(ns string) {
	err := inNetns(nil, ns, func() error {
		_, err := Open(Config{Mode: TC, Interfaces: []string{"lo"}})
		return err
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	time.Sleep(time.Minute)
	os.Exit(2)
}

// tcxPrograms returns how many tcx ingress programs lo has in ns.
func tcxPrograms(t *testing.T, ns string) int {
	t.Helper()
	var n int
	err := inNetns(t, ns, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		r, err := link.QueryPrograms(link.QueryOptions{Target: lo.Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		n = len(r.Programs)
		return nil
	})
	if err != nil {
		t.Fatalf("query tcx programs: %v", err)
	}
	return n
}

// TestCrashDetaches kills a process that has the programs attached and
// checks that the kernel detached them: the bpf_links die with their last
// file descriptor, so nothing stays in the kernel to relay on stale maps.
func TestCrashDetaches(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t, uniq()+"k")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+ns)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "attached") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if strings.Contains(line, ErrUnsupported.Error()) && !testenv.InCI() {
			t.Skipf("BPF refused here: %s", line)
		}
		t.Fatalf("child: %q", line)
	}
	if n := tcxPrograms(t, ns); n != 1 {
		t.Errorf("%d tcx programs on lo while the child runs, want 1", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := tcxPrograms(t, ns); n != 0 {
			return fmt.Errorf("%d tcx programs on lo after SIGKILL", n)
		}
		return nil
	})
}
