//go:build !unix

package listener

import "syscall"

// rawIO is false: outConn reads through net.TCPConn and writes every
// message through its flusher, since non-blocking reads and writes on the
// raw socket are implemented on Unix only.
const rawIO = false

func sysWrite(uintptr, []byte) (int, error) { return 0, syscall.EAGAIN }

func sysRead(uintptr, []byte) (int, error) { return 0, syscall.EAGAIN }
