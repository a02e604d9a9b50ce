//go:build !linux

package dataplane

import (
	"errors"
	"syscall"
)

// reusePortSupported: elsewhere a listener gets one socket.
const reusePortSupported = false

func controlReusePort(_, _ string, _ syscall.RawConn) error { return nil }

// setDontFragment is not implemented off Linux; Allocate with DONT-FRAGMENT
// then gets 420 (RFC 8656 §7.2).
func setDontFragment(syscall.RawConn, bool) error {
	return errors.New("DONT-FRAGMENT is not supported on this platform")
}
