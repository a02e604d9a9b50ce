package offload

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

// The user a rendered dataplane pod runs as without offload (operator/render).
const nonRootID = "65532"

// offloadCaps are the capabilities docs/offload.md ("What a pod needs")
// measured as the offload's whole need on Linux 6.x, in setpriv's syntax.
const offloadCaps = "+bpf,+net_admin,+perfmon"

// offloadCapsHex is that set as /proc/<pid>/status prints it (CapEff):
// bits 12 (NET_ADMIN), 38 (PERFMON) and 39 (BPF).
const offloadCapsHex = "000000c000001000"

// fileCapsV2 is the security.capability xattr that `setcap
// cap_bpf,cap_net_admin,cap_perfmon+ep` writes: a vfs_cap_data of revision
// 2 with the effective bit (magic 0x02000001), permitted NET_ADMIN (bit
// 12) in the low word and PERFMON, BPF (bits 38, 39) in the high one,
// nothing inheritable; little-endian.
var fileCapsV2 = []byte{
	0x01, 0x00, 0x00, 0x02, // magic_etc
	0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // permitted[0], inheritable[0]
	0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // permitted[1], inheritable[1]
}

// TestOffloadLeastPrivilege runs ternd as a non-root user (65532) with
// only the capabilities docs/offload.md names, given two ways a non-root
// process can hold them: ambient capabilities, and file capabilities on
// the binary with the bounding set holding them and no ambient ones (what
// an image could carry). Both attach and relay the pion client's echoes
// in the kernel.
func TestOffloadLeastPrivilege(t *testing.T) {
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, "setpriv (util-linux)", err)
	user := []string{"setpriv", "--reuid=" + nonRootID, "--regid=" + nonRootID, "--clear-groups",
		"--bounding-set=-all," + offloadCaps}
	for _, c := range []struct {
		name     string
		wrap     []string
		fileCaps bool
	}{
		{"ambient", append(user[:len(user):len(user)], "--inh-caps=-all,"+offloadCaps, "--ambient-caps=-all,"+offloadCaps, "--"), false},
		{"file capabilities", append(user[:len(user):len(user)], "--inh-caps=-all", "--"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp := newTopo(t)
			dir := worldReadableDir(t)
			bin := filepath.Join(dir, "ternd")
			copyFile(t, testenv.Ternd(t), bin, 0o755)
			if c.fileCaps {
				if err := unix.Setxattr(bin, "security.capability", fileCapsV2, 0); err != nil {
					testenv.SkipOrFail(t, "setting file capabilities on %s: %v", bin, err)
				}
			}
			r := startTerndAs(t, tp, bin, c.wrap, filepath.Join(dir, "tern.yaml"), "--offload-engine", "TC")
			// What the running ternd holds: the user and exactly the three
			// capabilities, effective.
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Uid:\t" + nonRootID + "\t" + nonRootID + "\t" + nonRootID, "CapEff:\t" + offloadCapsHex} {
				if !strings.Contains(string(status), want) {
					t.Errorf("ternd's /proc status lacks %q:\n%s", want, status)
				}
			}
			a := startEchoPeer(t, tp, peerA+":24640")
			_, _, relay := pionClient(t, tp)
			untilOffloaded(t, r, relay, a.c.LocalAddr().(*net.UDPAddr))
			warm, m0 := a.count(), r.metrics(t)
			const n = 200
			echoes(t, relay, a.c.LocalAddr().(*net.UDPAddr), n, 160)
			m := delta(m0, r.metrics(t))
			c2p, p2c := m[`tern_offload_packets_total{direction="client_to_peer"}`], m[`tern_offload_packets_total{direction="peer_to_client"}`]
			t.Logf("kernel relayed %v to the peer and %v back of %d echoes once bound", c2p, p2c, n)
			if c2p != n || p2c != n {
				t.Errorf("once the channel was bound the kernel relayed %v of %d to the peer and %v back; want all", c2p, n, p2c)
			}
			if got := a.count() - warm; got != n {
				t.Errorf("peer got %d, want %d", got, n)
			}
		})
	}
}

// worldReadableDir returns a new directory that every user may read and
// search (t.TempDir's parent is 0700), removed when t ends.
func worldReadableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tern-offload-priv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
