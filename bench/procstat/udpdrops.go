package procstat

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// UDPDrops returns the datagrams the kernel dropped on the UDP sockets that process pid holds
// open, summed: the "drops" column of /proc/net/udp and udp6 (a full receive buffer, mostly),
// for the sockets whose inodes pid's file descriptors name. It tells whether datagrams were
// lost before the process could read them, which no counter of the process itself can show.
// The tables are read in the caller's network namespace, which must be pid's.
func UDPDrops(pid int) (uint64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	targets, err := p.FileDescriptorTargets()
	if err != nil {
		return 0, err
	}
	inodes := map[uint64]bool{}
	for _, t := range targets {
		if s, ok := strings.CutPrefix(t, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				inodes[n] = true
			}
		}
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	var drops uint64
	for _, read := range []func() (procfs.NetUDP, error){fs.NetUDP, fs.NetUDP6} {
		lines, err := read()
		if err != nil {
			return 0, fmt.Errorf("udp table: %w", err)
		}
		for _, l := range lines {
			if inodes[l.Inode] && l.Drops != nil {
				drops += *l.Drops
			}
		}
	}
	return drops, nil
}
