package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// mimirEnv names a mimir binary to use instead of hack/mimir.sh's.
const mimirEnv = "TERN_MIMIR"

var (
	mimirOnce sync.Once
	mimirPath string
	mimirSkip string
	mimirErr  error
)

// Mimir returns the path of a Grafana Mimir binary and checks that Debian's vmagent (package
// victoria-metrics) is on PATH, for the metrics end-to-end tests. The order is: $TERN_MIMIR if
// set; the cache of hack/mimir.sh if it is filled; under CI, a build by hack/mimir.sh (10-20
// minutes when cold; it also installs victoria-metrics). Outside CI with nothing built it skips
// tb with the command that builds it; under CI a missing binary fails tb.
func Mimir(tb testing.TB) string {
	tb.Helper()
	mimirOnce.Do(func() { mimirPath, mimirSkip, mimirErr = findMimir() })
	if mimirErr != nil {
		tb.Fatalf("mimir: %v", mimirErr)
	}
	if mimirSkip != "" {
		SkipOrFail(tb, "%s", mimirSkip)
	}
	_, err := exec.LookPath("vmagent")
	Require(tb, "vmagent (Debian package victoria-metrics; hack/mimir.sh installs it)", err)
	return mimirPath
}

func findMimir() (path, skip string, err error) {
	if p := os.Getenv(mimirEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("$%s: %w", mimirEnv, err)
		}
		return p, "", nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	script := filepath.Join(root, "hack", "mimir.sh")
	if p, err := runScript(script, "--check"); err == nil {
		return p, "", nil
	}
	if !InCI() {
		return "", "mimir: skipped because TERN_MIMIR and CI are unset and hack/mimir.sh has not " +
			"built Grafana Mimir (or vmagent is missing); to run these tests: hack/mimir.sh", nil
	}
	fmt.Fprintln(os.Stderr, "mimir: building Grafana Mimir with hack/mimir.sh (10-20 minutes when cold)")
	p, err := runScript(script)
	if err != nil {
		return "", "", err
	}
	return p, "", nil
}
