package offload

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

var update = flag.Bool("update", false, "rewrite testdata/kernel-requirements.golden from the programs")

// minKernel is the first Linux release of each helper, map type and
// program type the programs use (docs.ebpf.io and the kernel's git
// history). TestKernelRequirements fails for one missing here, so a new
// helper gets its version looked up before it is used.
var minKernel = map[string]string{
	"FnMapLookupElem":   "3.19",
	"FnKtimeGetNs":      "4.1",
	"FnSkbStoreBytes":   "4.1",
	"FnL3CsumReplace":   "4.1",
	"FnL4CsumReplace":   "4.1",
	"FnRedirect":        "4.4", // from XDP: 4.14
	"FnSkbLoadBytes":    "4.5",
	"FnCsumDiff":        "4.6",
	"FnSkbChangeTail":   "4.9",
	"FnSkbPullData":     "4.9",
	"FnXdpAdjustHead":   "4.10",
	"FnFibLookup":       "4.18",
	"FnXdpAdjustTail":   "4.18",
	"FnRedirectNeigh":   "5.10", // with the next-hop argument from its first release
	"FnXdpLoadBytes":    "5.18",
	"Hash":              "3.19",
	"PerCPUArray":       "4.6",
	".rodata":           "5.2", // global data (l4_csum_ipv6_flag), an Array map frozen read-only
	"SchedCLS":          "4.1",
	"XDP":               "4.8",
	"BPF_F_NO_PREALLOC": "4.6",
}

// oldest is the oldest kernel the programs must load on: 5.10, the oldest
// long-term kernel Kubernetes nodes still run (issue 25).
const oldest = "5.10"

func versionAfter(a, b string) bool {
	pa, pb := strings.SplitN(a, ".", 2), strings.SplitN(b, ".", 2)
	ma, _ := strconv.Atoi(pa[0])
	mb, _ := strconv.Atoi(pb[0])
	na, _ := strconv.Atoi(pa[1])
	nb, _ := strconv.Atoi(pb[1])
	return ma > mb || ma == mb && na > nb
}

// TestKernelRequirements lists, from the compiled object, each program's
// helpers and each map's type with the first kernel that has it, checks
// the list against testdata/kernel-requirements.golden (-update rewrites
// it; docs/offload.md has the same table), and fails where anything is
// newer than 5.10.
func TestKernelRequirements(t *testing.T) {
	spec, err := loadTern()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var problems []string
	need := func(what, name string) string {
		v, ok := minKernel[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s %s: not in minKernel; look up its first kernel", what, name))
			return "?"
		}
		if versionAfter(v, oldest) {
			problems = append(problems, fmt.Sprintf("%s %s needs Linux %s, after %s", what, name, v, oldest))
		}
		return v
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range spec.Programs {
			if !yield(n) {
				return
			}
		}
	}) {
		p := spec.Programs[name]
		fmt.Fprintf(&b, "program %s (%s) %s\n", name, p.Type, need("program type", p.Type.String()))
		seen := map[string]bool{}
		for _, ins := range p.Instructions {
			if ins.IsBuiltinCall() {
				seen[asm.BuiltinFunc(ins.Constant).String()] = true
			}
		}
		for _, fn := range slices.Sorted(func(yield func(string) bool) {
			for f := range seen {
				if !yield(f) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, "  helper %s %s\n", fn, need("helper", fn))
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range spec.Maps {
			if !yield(n) {
				return
			}
		}
	}) {
		m := spec.Maps[name]
		kind := m.Type.String()
		if name == ".rodata" {
			kind = name
		}
		fmt.Fprintf(&b, "map %s (%s) %s", name, m.Type, need("map type", kind))
		if m.Flags&1 != 0 { // BPF_F_NO_PREALLOC
			fmt.Fprintf(&b, ", BPF_F_NO_PREALLOC %s", need("map flag", "BPF_F_NO_PREALLOC"))
		}
		b.WriteString("\n")
	}
	golden := filepath.Join("testdata", "kernel-requirements.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("the programs' helpers and maps changed (go test -run TestKernelRequirements -update ./dataplane/offload/ rewrites %s; update docs/offload.md too):\n%s", golden, b.String())
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestVerifierLog loads the programs with the verifier's statistics log
// (the one build, which older kernels load too: TestKernelRequirements
// holds it to 5.10's helpers) and checks that the verifier accepted each
// within 5.10's limits: a log naming the processed instructions, under
// the million a privileged load may process.
func TestVerifierLog(t *testing.T) {
	requireRoot(t)
	spec, err := loadTern()
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		n := len(verr.Log)
		t.Fatalf("verifier rejected the programs:\n%s", strings.Join(verr.Log[max(0, n-30):], "\n"))
	}
	if err != nil {
		if errors.Is(unsupported("load programs", err), ErrUnsupported) {
			t.Skipf("BPF refused here: %v", err)
		}
		t.Fatal(err)
	}
	defer coll.Close()
	re := regexp.MustCompile(`processed (\d+) insns \(limit (\d+)\)`)
	for name, p := range coll.Programs {
		m := re.FindStringSubmatch(p.VerifierLog)
		if m == nil {
			t.Errorf("%s: verifier log without the processed count:\n%s", name, p.VerifierLog)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n >= 1_000_000 {
			t.Errorf("%s: the verifier processed %d instructions, 5.10's limit is 1000000", name, n)
		}
		t.Logf("%s: %s", name, strings.TrimSpace(p.VerifierLog))
	}
}
