package importrules

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tern-gw/tern"

// rule forbids the packages matched by pattern (a go list pattern, relative to the module
// root) to depend, directly or not, on any package under one of forbidden, except those
// under one of allowed.
type rule struct {
	pattern   string
	forbidden []string
	allowed   []string
}

var rules = []rule{
	{
		pattern:   "./turn/...",
		forbidden: []string{module + "/dataplane", module + "/operator", module + "/internal/kubeclient", "k8s.io", "sigs.k8s.io"},
	},
	{
		pattern:   "./dataplane/...",
		forbidden: []string{module + "/operator", "sigs.k8s.io/gateway-api", "sigs.k8s.io/controller-runtime"},
	},
	{
		// The contract both sides link: plain data, decoding and validation,
		// and the leaf packages of its vocabularies (endpoint, loglevel,
		// placeholder, protocol).
		pattern:   "./dataplane/config/...",
		forbidden: []string{module, "k8s.io", "sigs.k8s.io/gateway-api", "sigs.k8s.io/controller-runtime"},
		allowed:   []string{module + "/dataplane/config"},
	},
	{
		pattern:   "./cmd/tern-operator",
		forbidden: []string{module + "/dataplane"},
		allowed:   []string{module + "/dataplane/config"},
	},
}

// TestImportRules runs `go list -deps` on each rule's packages and fails naming every import
// that crosses a forbidden boundary, as "importer imports forbidden".
func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	for _, r := range rules {
		t.Run(r.pattern, func(t *testing.T) {
			imports := listImports(t, root, r.pattern)
			if len(imports) == 0 {
				t.Fatalf("go list %s found no packages", r.pattern)
			}
			for _, v := range r.violations(imports) {
				t.Error(v)
			}
		})
	}
}

// TestViolations checks the checker itself on a made-up graph, since TestImportRules passing
// says nothing when the checker cannot fail.
func TestViolations(t *testing.T) {
	r := rule{forbidden: []string{module + "/dataplane", "k8s.io"}, allowed: []string{module + "/dataplane/config"}}
	imports := map[string][]string{
		module + "/cmd/x": {module + "/dataplane/config", module + "/dataplane/k8sconfig",
			module + "/dataplaneutil", "k8s.io/api/core/v1", "fmt"},
		module + "/dataplane/config":      {"sigs.k8s.io/yaml"}, // allowed, and sigs.k8s.io is not k8s.io
		module + "/dataplane/k8sconfig":   {"k8s.io/client-go/rest", module + "/dataplane/config"},
		"k8s.io/client-go/rest":           {"k8s.io/apimachinery/pkg/runtime"},
		"k8s.io/apimachinery/pkg/runtime": nil,
		"k8s.io/api/core/v1":              nil,
	}
	// Only the boundary crossings, not what lies behind them: those are the imports to remove.
	want := []string{
		module + "/cmd/x imports " + module + "/dataplane/k8sconfig",
		module + "/cmd/x imports k8s.io/api/core/v1",
	}
	if got := r.violations(imports); !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// violations returns, sorted, "A imports B" for every package A that the rule allows and that
// imports a package B it forbids. Packages behind B are not reported: B is the one to remove.
func (r rule) violations(imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		if r.forbids(pkg) {
			continue
		}
		for _, d := range deps {
			if r.forbids(d) {
				out = append(out, pkg+" imports "+d)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r rule) forbids(pkg string) bool {
	return under(pkg, r.forbidden) && !under(pkg, r.allowed)
}

// under reports whether pkg is one of paths or inside one of them (path boundaries count:
// "k8s.io" covers "k8s.io/api/core/v1", not "k8s.iox").
func under(pkg string, paths []string) bool {
	for _, p := range paths {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// listImports returns the direct imports of every package that pattern's packages depend on,
// themselves included, as `go list -deps` reports them for the current platform.
func listImports(t *testing.T, root, pattern string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pattern)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, stderr.Bytes())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	return imports
}

// moduleRoot returns the directory of the module's go.mod, where the rules' patterns are
// rooted.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("not in a module (GOMOD=%q)", gomod)
	}
	return filepath.Dir(gomod)
}
