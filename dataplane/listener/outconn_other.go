//go:build !unix

package listener

import "syscall"

// sysWrite reports a full socket, so that every write goes through the
// flusher: non-blocking writes are implemented on Unix only.
func sysWrite(uintptr, []byte) (int, error) { return 0, syscall.EAGAIN }
