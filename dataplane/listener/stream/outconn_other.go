//go:build !unix

package stream

import "syscall"

// rawIO is false: outConn writes every message through its flusher,
// since non-blocking writes on the raw socket are implemented on Unix
// only.
const rawIO = false

func sysWrite(uintptr, []byte) (int, error) { return 0, syscall.EAGAIN }
