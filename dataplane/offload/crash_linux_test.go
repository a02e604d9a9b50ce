package offload

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tern-gw/tern/internal/testenv"
)

// crashChildEnv names the namespace a re-executed test binary opens the
// offload in before it waits to be killed.
const crashChildEnv = "TERN_OFFLOAD_CRASH_CHILD_NETNS"

// refusedChildEnv makes a re-executed test binary give up root and
// report what Open says.
const refusedChildEnv = "TERN_OFFLOAD_REFUSED_CHILD"

func TestMain(m *testing.M) {
	if ns := os.Getenv(crashChildEnv); ns != "" {
		crashChild(ns)
		return
	}
	if os.Getenv(refusedChildEnv) != "" {
		refusedChild()
		return
	}
	os.Exit(m.Run())
}

// refusedChild drops root (and with it every capability) and prints
// whether Open's error wraps ErrUnsupported, as Auto's fallback needs, and
// ErrNoPrivilege, which a pod reports as MissingCapability.
func refusedChild() {
	// "perfmon" children were started by setpriv without CAP_PERFMON and
	// CAP_SYS_ADMIN; the others give up root here.
	if os.Getenv(refusedChildEnv) != "perfmon" {
		if err := syscall.Setuid(65534); err != nil {
			fmt.Println("setuid:", err)
			os.Exit(1)
		}
	}
	o, err := Open(Config{Mode: TC, Interfaces: []string{"lo"}})
	switch {
	case err == nil:
		o.Close()
		fmt.Println("opened")
	case errors.Is(err, ErrUnsupported) && errors.Is(err, ErrNoPrivilege):
		fmt.Println("unsupported:", err)
	case errors.Is(err, ErrUnsupported):
		fmt.Println("unsupported but not ErrNoPrivilege:", err)
	default:
		fmt.Println("other:", err)
	}
	os.Exit(0)
}

// TestRefusedIsUnsupported runs Open without privileges: its error must
// wrap ErrUnsupported, which is what makes Auto fall back to sockets.
func TestRefusedIsUnsupported(t *testing.T) {
	requireRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), refusedChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "unsupported:") {
		t.Fatalf("unprivileged Open: %s", out)
	}
	t.Logf("%s", out)
}

// TestNoPerfmonIsUnsupported runs Open as root without CAP_PERFMON and
// CAP_SYS_ADMIN, as a pod whose securityContext adds only BPF and
// NET_ADMIN would: the verifier refuses the programs, and that must read
// as ErrUnsupported so that Auto falls back instead of exiting.
func TestNoPerfmonIsUnsupported(t *testing.T) {
	requireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	testenv.Require(t, "setpriv (util-linux)", err)
	cmd := exec.Command(setpriv, "--bounding-set", "-perfmon,-sys_admin", "--inh-caps", "-all", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), refusedChildEnv+"=perfmon")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "unsupported:") {
		t.Fatalf("Open without CAP_PERFMON: %s", out)
	}
	t.Logf("%s", out)
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
