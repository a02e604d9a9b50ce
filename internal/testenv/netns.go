package testenv

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// InFreshNetns runs the calling test again, as root, in a network
// namespace of its own (unshare -n, lo up, IPv4 forwarding on there: the
// offload programs' FIB lookups need it), so that whatever it attaches or
// binds never touches the host's interfaces; the namespace goes when the
// run ends. It returns true in the outer run, which then has nothing left
// to do, and fails the test when the inner run does. Unprivileged, the
// test runs here (it returns false): BPF is refused anyway. Without
// unshare (util-linux) it skips, or fails under CI=true.
func InFreshNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv("TERN_TEST_NETNS") == t.Name() || os.Geteuid() != 0 {
		return false
	}
	_, err := exec.LookPath("unshare")
	Require(t, "unshare (util-linux)", err)
	cmd := exec.Command("unshare", "--net", "--", "sh", "-c", `ip link set lo up && sysctl -qw net.ipv4.conf.all.forwarding=1 net.ipv4.conf.lo.forwarding=1 && exec "$@"`, "sh",
		os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TERN_TEST_NETNS="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%v", err)
	}
	return true
}
