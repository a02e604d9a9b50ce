// Package procstat reads a process's CPU time and resident memory from
// /proc, the two server-side figures every ternbench result is normalized by.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. The kernel
// reports them in USER_HZ, which is part of the ABI and 100 on every Linux
// architecture Go supports, so it is a constant rather than a sysconf call.
const userHZ = 100

// CPU returns the user+system CPU time the process pid has used so far,
// all threads included (exited threads too: the kernel folds them into the
// process totals). Resolution is 10 ms, so steps must run long enough for
// the server to use a few hundred milliseconds of CPU.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// parseStat extracts utime+stime (fields 14 and 15) from a /proc/PID/stat
// line. The command name (field 2) may hold spaces and parentheses, so
// fields are counted after its last ')'.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("procstat: malformed stat line")
	}
	f := bytes.Fields(b[i+1:])
	// After ')' come field 3 (state) onwards: utime is field 14, stime 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("procstat: stat line has %d fields after the name", len(f))
	}
	u, err1 := strconv.ParseUint(string(f[utime]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[stime]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("procstat: bad utime/stime %q %q", f[utime], f[stime])
	}
	return time.Duration(u+s) * time.Second / userHZ, nil
}

// RSS returns the resident set size of pid in bytes (VmRSS of
// /proc/PID/status).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseRSS(b)
}

// parseRSS finds "VmRSS:   1234 kB" in a /proc/PID/status document.
func parseRSS(b []byte) (int64, error) {
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("procstat: malformed VmRSS line %q", bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: VmRSS: %v", err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("procstat: no VmRSS (kernel thread or zombie?)")
}

// Memory is a process's resident memory split as /proc/PID/status splits it,
// in bytes. File is pages of mapped files (for a Go server mostly its own
// binary: text, read-only data and the pclntab that init functions and the
// running code touched); they are clean page cache, shared and reclaimable.
// Anon is the process's own memory: heap, stacks, written data.
type Memory struct {
	RSS, Anon, File, Shmem int64
}

// ReadMemory returns the resident memory of pid (VmRSS, RssAnon, RssFile
// and RssShmem of /proc/PID/status).
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	return parseMemory(b)
}

func parseMemory(b []byte) (Memory, error) {
	var m Memory
	fields := []struct {
		key string
		dst *int64
	}{{"VmRSS:", &m.RSS}, {"RssAnon:", &m.Anon}, {"RssFile:", &m.File}, {"RssShmem:", &m.Shmem}}
	found := 0
	for line := range bytes.Lines(b) {
		for _, f := range fields {
			rest, ok := bytes.CutPrefix(line, []byte(f.key))
			if !ok {
				continue
			}
			v := bytes.Fields(rest)
			if len(v) != 2 || string(v[1]) != "kB" {
				return Memory{}, fmt.Errorf("procstat: malformed %s line %q", f.key, bytes.TrimSpace(line))
			}
			kb, err := strconv.ParseInt(string(v[0]), 10, 64)
			if err != nil {
				return Memory{}, fmt.Errorf("procstat: %s %v", f.key, err)
			}
			*f.dst = kb * 1024
			found++
		}
	}
	if found != len(fields) {
		return Memory{}, fmt.Errorf("procstat: no VmRSS/RssAnon/RssFile/RssShmem (kernel thread, zombie, or a kernel before 4.5?)")
	}
	return m, nil
}

// MachineBusy returns the CPU time all CPUs of the machine have spent
// busy so far: user+nice+system+irq+softirq of /proc/stat's "cpu" line
// (idle, iowait, steal and the guest times, which user already holds, left
// out). Work the kernel does in softirq on behalf of no process — the
// receive path of loopback and veth traffic, an eBPF fast path — counts
// here and in no /proc/PID/stat.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineStat(b)
}

func parseMachineStat(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 8 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("procstat: /proc/stat does not start with a cpu line")
	}
	var sum uint64
	// user nice system idle iowait irq softirq: fields 1, 2, 3, 6, 7.
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseUint(string(f[i]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: /proc/stat field %d %q", i, f[i])
		}
		sum += v
	}
	return time.Duration(sum) * time.Second / userHZ, nil
}
