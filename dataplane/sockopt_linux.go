package dataplane

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePortSupported: Linux balances SO_REUSEPORT sockets by 5-tuple hash.
const reusePortSupported = true

// controlReusePort sets SO_REUSEPORT so several sockets, each read by its
// own worker, share one listener address.
func controlReusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// setDontFragment sets the DF bit on everything the socket sends (RFC 8656
// §7.2 DONT-FRAGMENT), by turning on path-MTU discovery "do" mode.
func setDontFragment(c syscall.RawConn, ipv6 bool) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if ipv6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	})
	if err != nil {
		return err
	}
	return serr
}
