//go:build unix

package stream

import "syscall"

// rawIO is true: outConn writes the raw non-blocking socket.
const rawIO = true

// sysWrite is write(2) on a non-blocking socket.
func sysWrite(fd uintptr, b []byte) (int, error) { return syscall.Write(int(fd), b) }
