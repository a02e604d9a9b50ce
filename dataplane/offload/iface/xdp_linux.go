package iface

import (
	"net"

	"golang.org/x/sys/unix"
)

// XDPCandidate reports whether Auto tries native XDP on ifc: not on lo
// and not on a veth (the driver, as ethtool's ioctl names it). A veth's
// XDP sees a local sender's CHECKSUM_PARTIAL datagrams with only a
// pseudo-header checksum, which it cannot tell from full ones, and
// redirected frames reach a veth's peer only where that peer runs XDP
// itself or has GRO on; tc has neither problem.
func XDPCandidate(ifc *net.Interface) bool {
	if ifc.Flags&net.FlagLoopback != 0 {
		return false
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, ifc.Name)
	if err != nil {
		return false
	}
	return unix.ByteSliceToString(info.Driver[:]) != "veth"
}
