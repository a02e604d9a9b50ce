package main

import (
	"fmt"
	"os"
	"syscall"
)

// wantNoFile is the file-descriptor limit ternbench asks for before it starts servers: a
// memory step of K=60k needs 60k relay sockets in each server, more than common default
// hard limits (this machine's is 20000).
const wantNoFile = 1 << 18

// raiseNoFile raises RLIMIT_NOFILE, soft and hard, to wantNoFile when the process may
// (root, or CAP_SYS_RESOURCE), and else the soft limit to the hard one. Servers that
// ternbench launches inherit it. It goes through package syscall, which then stops restoring
// the original soft limit in child processes. A failure is reported on stderr, not fatal: the
// memory results say how many allocations were held and why.
func raiseNoFile() {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil {
		return
	}
	if cur.Cur >= wantNoFile {
		return
	}
	next := syscall.Rlimit{Cur: wantNoFile, Max: max(cur.Max, wantNoFile)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err == nil {
		return
	}
	next = syscall.Rlimit{Cur: cur.Max, Max: cur.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		fmt.Fprintf(os.Stderr, "ternbench: RLIMIT_NOFILE stays %d: %v\n", cur.Cur, err)
		return
	}
	if cur.Max < wantNoFile {
		fmt.Fprintf(os.Stderr, "ternbench: RLIMIT_NOFILE %d (hard limit; %d needs root): servers may hold fewer allocations\n", cur.Max, wantNoFile)
	}
}
