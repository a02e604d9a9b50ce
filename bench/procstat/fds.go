package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// FDs returns how many file descriptors the process pid has open (the entries of
// /proc/PID/fd; reading another user's process needs the right to ptrace it).
func FDs(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	return len(names), err
}

// MaxFDs returns the soft limit on open files of the process pid (RLIMIT_NOFILE, the
// "Max open files" row of /proc/PID/limits); -1 means unlimited.
func MaxFDs(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	return parseMaxFDs(b)
}

func parseMaxFDs(b []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("Max open files")) {
			continue
		}
		f := bytes.Fields(line[len("Max open files"):])
		if len(f) < 1 {
			break
		}
		if string(f[0]) == "unlimited" {
			return -1, nil
		}
		n, err := strconv.Atoi(string(f[0]))
		if err != nil {
			return 0, fmt.Errorf("procstat: bad open-files limit %q", f[0])
		}
		return n, nil
	}
	return 0, fmt.Errorf("procstat: no \"Max open files\" row in limits")
}
