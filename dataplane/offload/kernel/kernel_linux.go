package kernel

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// AtLeast reports whether the running kernel's release (uname(2)) is
// major.minor or later; false when it cannot be read.
func AtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// HasCapability reports whether the calling thread has capability c in its
// effective set (c is a unix.CAP_* number); false when capget(2) fails.
func HasCapability(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

// Refused reports whether err says the kernel refused an eBPF operation
// or lacks what it needs: EPERM or EACCES (no CAP_BPF, CAP_NET_ADMIN),
// cilium/ebpf's ErrNotSupported (a feature probe failed), EINVAL (an
// unknown program, map or attach type), ENOSYS or EOPNOTSUPP.
func Refused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) ||
		errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)
}
