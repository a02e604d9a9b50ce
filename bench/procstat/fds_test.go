package procstat

import (
	"os"
	"testing"
)

func TestParseMaxFDs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		err  bool
	}{
		{"Limit                     Soft Limit           Hard Limit           Units     \nMax open files            20000                20000                files     \n", 20000, false},
		{"Max open files            unlimited            unlimited            files\n", -1, false},
		{"Max processes 10 10 processes\n", 0, true},
		{"Max open files            many                 20000                files\n", 0, true},
	} {
		got, err := parseMaxFDs([]byte(c.in))
		if got != c.want || (err != nil) != c.err {
			t.Errorf("parseMaxFDs(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestFDsSelf(t *testing.T) {
	n, err := FDs(os.Getpid())
	if err != nil || n < 3 {
		t.Fatalf("FDs(self) = %d, %v", n, err)
	}
	if m, err := MaxFDs(os.Getpid()); err != nil || (m != -1 && m < n) {
		t.Fatalf("MaxFDs(self) = %d, %v with %d open", m, err, n)
	}
}
