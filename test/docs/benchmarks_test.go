package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBenchmarksMDIsGenerated: BENCHMARKS.md is what `hack/bench.sh --report`
// writes from bench/results and the hand-written parts (bench/report/template.md,
// bench/CLUSTER.md, bench/PROFILE*.md), byte for byte. A hand edit of
// BENCHMARKS.md itself would be lost at the next `make bench`; this says so
// now. The plots go to a temporary directory and must match the committed ones.
func TestBenchmarksMDIsGenerated(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "BENCHMARKS.md")
	plots := filepath.Join(dir, "plots")
	if err := os.MkdirAll(plots, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "hack/bench.sh", "--report")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "TERNBENCH_REPORT="+out, "TERNBENCH_PLOTS="+plots,
		"TERNBENCH_BIN="+filepath.Join(dir, "ternbench"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/bench.sh --report: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(repoRoot, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range max(len(gl), len(wl)) {
			var g, w []byte
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if !bytes.Equal(g, w) {
				t.Fatalf("BENCHMARKS.md is not what hack/bench.sh --report writes: first difference at line %d:\n  BENCHMARKS.md: %q\n  the report:    %q\n"+
					"edit bench/report/template.md, bench/CLUSTER.md or bench/PROFILE*.md and run hack/bench.sh --report", i+1, w, g)
			}
		}
	}
	entries, err := os.ReadDir(plots)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		g, err := os.ReadFile(filepath.Join(plots, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(filepath.Join(repoRoot, "bench", "results", e.Name()))
		if err != nil || !bytes.Equal(g, w) {
			t.Errorf("plot %s differs from bench/results' (%v): run hack/bench.sh --report", e.Name(), err)
		}
	}
}
