package procstat

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		bad        bool
	}{
		{"plain", "42 (ternd) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1 1 1", 3 * time.Second, false},
		{"name with spaces and parens", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 1 1", 30 * time.Millisecond, false},
		{"truncated", "7 (x) R 1 2", 0, true},
		{"no name", "garbage", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line))
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want error %v", err, tc.bad)
			}
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRSS(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      int64
		bad       bool
	}{
		{"found", "Name:\tternd\nVmPeak:\t 9 kB\nVmRSS:\t    2048 kB\nThreads: 4\n", 2048 * 1024, false},
		{"missing", "Name:\tkthreadd\n", 0, true},
		{"bad unit", "VmRSS:\t 12 MB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRSS([]byte(tc.doc))
			if (err != nil) != tc.bad || got != tc.want {
				t.Fatalf("got %d, %v; want %d (error %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}

func TestSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.SkipOrFail(t, "/proc is Linux only, this is %s", runtime.GOOS)
	}
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	after, _ := CPU(os.Getpid())
	if after <= before {
		t.Fatalf("CPU did not advance while spinning: %v -> %v", before, after)
	}
	if rss, err := RSS(os.Getpid()); err != nil || rss < 1<<20 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
}

func TestParseMemory(t *testing.T) {
	doc := "Name:\tternd\nVmRSS:\t   18000 kB\nRssAnon:\t    3500 kB\nRssFile:\t   14500 kB\nRssShmem:\t       0 kB\n"
	m, err := parseMemory([]byte(doc))
	if err != nil || m != (Memory{RSS: 18000 << 10, Anon: 3500 << 10, File: 14500 << 10}) {
		t.Fatalf("got %+v, %v", m, err)
	}
	if _, err := parseMemory([]byte("Name:\tx\nVmRSS:\t 1 kB\n")); err == nil {
		t.Fatal("no error without RssAnon/RssFile")
	}
}

func TestReadMemorySelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Anon+m.File+m.Shmem != m.RSS {
		t.Fatalf("%+v: RSS is not anon+file+shmem", m)
	}
}

func TestParseMachineStat(t *testing.T) {
	got, err := parseMachineStat([]byte("cpu  100 5 50 9000 7 3 2 11 0 0\ncpu0 50 2 25 4500 3 1 1 5 0 0\n"))
	if err != nil || got != 160*time.Second/userHZ {
		t.Fatalf("got %v, %v; want %v", got, err, 160*time.Second/userHZ)
	}
	if _, err := parseMachineStat([]byte("intr 1 2 3\n")); err == nil {
		t.Fatal("a file without the cpu line parsed")
	}
	if b, err := MachineBusy(); err != nil || b <= 0 {
		t.Fatalf("MachineBusy on this machine: %v, %v", b, err)
	}
}
