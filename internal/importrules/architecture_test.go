package importrules

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// archRule is one row of docs/architecture.md's import table: the Tern
// packages that the packages matching pkg may import directly.
type archRule struct {
	pkg      string   // "dataplane/relay", or "bench/..." for a tree
	allowed  []string // patterns of the same form
	anything bool
}

// matches reports whether the module-relative package p matches pattern.
func matches(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

// readArchTable parses the rows between the importrules markers.
func readArchTable(t *testing.T, path string) []archRule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- importrules:begin -->")
	table, _, ok2 := strings.Cut(table, "<!-- importrules:end -->")
	if !ok || !ok2 {
		t.Fatalf("%s: no table between <!-- importrules:begin --> and <!-- importrules:end -->", path)
	}
	var rules []archRule
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 2 || !strings.Contains(cells[0], "`") {
			continue // header, separator or blank
		}
		r := archRule{pkg: strings.Trim(strings.TrimSpace(cells[0]), "`")}
		switch allowed := strings.TrimSpace(cells[1]); allowed {
		case "anything":
			r.anything = true
		case "nothing from Tern":
		default:
			for _, a := range strings.Split(allowed, ",") {
				r.allowed = append(r.allowed, strings.Trim(strings.TrimSpace(a), "`"))
			}
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: the import table has no rows", path)
	}
	return rules
}

// ruleFor is the row for p: its exact row, else the longest tree that holds it.
func ruleFor(rules []archRule, p string) (archRule, bool) {
	best, found := archRule{}, false
	for _, r := range rules {
		if r.pkg == p {
			return r, true
		}
		if matches(r.pkg, p) && (!found || len(r.pkg) > len(best.pkg)) {
			best, found = r, true
		}
	}
	return best, found
}

// archViolations checks direct imports (module-relative package -> its
// module-relative imports) against the table.
func archViolations(rules []archRule, imports map[string][]string) []string {
	var out []string
	for p, deps := range imports {
		r, ok := ruleFor(rules, p)
		if !ok {
			out = append(out, fmt.Sprintf("%s has no row in the import table", p))
			continue
		}
		if r.anything {
			continue
		}
	deps:
		for _, d := range deps {
			for _, a := range r.allowed {
				if matches(a, d) {
					continue deps
				}
			}
			out = append(out, fmt.Sprintf("%s imports %s, which its row (%s) does not allow", p, d, r.pkg))
		}
	}
	return out
}

// TestArchitectureTable holds the code to the import table of
// docs/architecture.md, so the page that explains the layering and the
// layering itself cannot drift apart.
func TestArchitectureTable(t *testing.T) {
	root := moduleRoot(t)
	rules := readArchTable(t, filepath.Join(root, "docs", "architecture.md"))
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		p := strings.TrimPrefix(fields[0], module+"/")
		imports[p] = nil
		for _, d := range fields[1:] {
			if rel, ok := strings.CutPrefix(d, module+"/"); ok {
				imports[p] = append(imports[p], rel)
			}
		}
	}
	if len(imports) < 10 {
		t.Fatalf("go list found %d packages", len(imports))
	}
	for _, v := range archViolations(rules, imports) {
		t.Error(v)
	}
}

// TestArchViolations checks the table checker on a made-up graph.
func TestArchViolations(t *testing.T) {
	rules := []archRule{
		{pkg: "turn"},
		{pkg: "dataplane/...", allowed: []string{"turn", "dataplane/..."}},
		{pkg: "dataplane/config"},
		{pkg: "test/...", anything: true},
	}
	got := archViolations(rules, map[string][]string{
		"turn":             nil,
		"dataplane":        {"turn", "dataplane/relay"},
		"dataplane/relay":  {"operator/render"},
		"dataplane/config": {"turn"},
		"test/e2e":         {"operator/render"},
		"cmd/x":            nil,
	})
	want := map[string]bool{
		"dataplane/relay imports operator/render, which its row (dataplane/...) does not allow": true,
		"dataplane/config imports turn, which its row (dataplane/config) does not allow":        true,
		"cmd/x has no row in the import table":                                                  true,
	}
	if len(got) != len(want) {
		t.Errorf("violations %q, want %d", got, len(want))
	}
	for _, v := range got {
		if !want[v] {
			t.Errorf("unexpected violation %q", v)
		}
	}
}
