package kernel

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

func TestAtLeast(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		major, minor int
		want         bool
	}{
		{ma, mi, true}, {ma, mi + 1, false}, {ma + 1, 0, false}, {ma - 1, mi + 100, true}, {2, 6, true},
	} {
		if got := AtLeast(c.major, c.minor); got != c.want {
			t.Errorf("on %d.%d: AtLeast(%d, %d) = %v, want %v", ma, mi, c.major, c.minor, got, c.want)
		}
	}
}

// TestHasCapability agrees with the kernel's own account of this
// thread's effective capabilities (CapEff in /proc/thread-self/status).
func TestHasCapability(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	var eff uint64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			if eff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if got, want := HasCapability(c), eff&(1<<c) != 0; got != want {
			t.Errorf("HasCapability(%d) = %v, CapEff says %v", c, got, want)
		}
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("load: %w", unix.EPERM), true},
		{fmt.Errorf("load: %w", unix.EACCES), true},
		{fmt.Errorf("probe: %w", ebpf.ErrNotSupported), true},
		{fmt.Errorf("attach: %w", unix.EINVAL), true},
		{fmt.Errorf("bpf: %w", unix.ENOSYS), true},
		{fmt.Errorf("attach: %w", unix.EOPNOTSUPP), true},
		{fmt.Errorf("map: %w", unix.E2BIG), false},
		{errors.New("other"), false},
	} {
		if got := Refused(c.err); got != c.want {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
