package memlimit

import (
	"io/fs"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"536870912\n", 536870912, true},    // v2 or v1: 512 MiB
		{"max\n", 0, false},                 // v2: no limit
		{"9223372036854771712\n", 0, false}, // v1: no limit (4 KiB pages)
		{"9223372036854710272\n", 0, false}, // v1: no limit (64 KiB pages)
		{"4611686018427387903\n", 4611686018427387903, true},
		{"0\n", 0, false},
		{"-1\n", 0, false},
		{"", 0, false},
		{"12abc\n", 0, false},
		{"99999999999999999999\n", 0, false}, // overflows int64
	} {
		got, ok := Parse(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReadFrom: cgroup v2's memory.max wins; v1's file is read
// where v2's is missing; neither, or an unlimited one, is no limit.
func TestReadFrom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2", map[string]string{cgroupMemoryFiles[0]: "268435456\n", cgroupMemoryFiles[1]: "1024\n"}, 268435456, true},
		{"v2 unlimited", map[string]string{cgroupMemoryFiles[0]: "max\n", cgroupMemoryFiles[1]: "1024\n"}, 0, false},
		{"v1", map[string]string{cgroupMemoryFiles[1]: "134217728\n"}, 134217728, true},
		{"v1 unlimited", map[string]string{cgroupMemoryFiles[1]: "9223372036854771712\n"}, 0, false},
		{"none", nil, 0, false},
	} {
		read := func(name string) ([]byte, error) {
			if s, ok := tc.files[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		}
		if got, ok := readFrom(read); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestStateBudgetRule: ternd's flag wins, then limits.stateBudgetMiB,
// then half the container's memory limit, then DefaultStateBudget.
func TestStateBudgetRule(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		flag, cfg int
		limit     int64
		want      int64
	}{
		{0, 0, 0, DefaultStateBudget},
		{0, 0, 512 * mib, 256 * mib},
		{0, 0, 2048 * mib, 1024 * mib},
		{0, 64, 512 * mib, 64 * mib},
		{0, -1 /* config.NoLimit */, 512 * mib, 0},
		{32, 64, 512 * mib, 32 * mib},
		{-1, 64, 512 * mib, 0},
	} {
		if got := StateBudget(tc.flag, tc.cfg, tc.limit); got != tc.want {
			t.Errorf("StateBudget(flag %d, cfg %d, limit %d) = %d, want %d", tc.flag, tc.cfg, tc.limit, got, tc.want)
		}
	}
}

// FuzzParse: any contents give a positive limit below 2^62, or
// none, and never a panic.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := Parse(s)
		if ok && (n <= 0 || n >= unlimitedV1) {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
		if !ok && n != 0 {
			t.Fatalf("Parse(%q) = %d without a limit", s, n)
		}
	})
}
