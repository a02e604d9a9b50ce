package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// kedaEnv names a directory holding keda, keda-adapter and crds/ to use instead of
// hack/keda.sh's.
const kedaEnv = "TERN_KEDA"

var (
	kedaOnce sync.Once
	kedaDir  string
	kedaSkip string
	kedaErr  error
)

// KEDA returns the directory of KEDA's operator (keda), its metrics API server (keda-adapter)
// and its CRDs (crds/*.yaml), for the KEDA scaling test of test/cluster. The order is: $TERN_KEDA
// if set; the cache of hack/keda.sh if it is filled; under CI, a build by hack/keda.sh. Outside
// CI with nothing built it skips tb with the command that builds it; under CI a missing build
// fails tb.
func KEDA(tb testing.TB) string {
	tb.Helper()
	kedaOnce.Do(func() { kedaDir, kedaSkip, kedaErr = findKEDA() })
	if kedaErr != nil {
		tb.Fatalf("keda: %v", kedaErr)
	}
	if kedaSkip != "" {
		SkipOrFail(tb, "%s", kedaSkip)
	}
	return kedaDir
}

func findKEDA() (dir, skip string, err error) {
	if d := os.Getenv(kedaEnv); d != "" {
		for _, f := range []string{"keda", "keda-adapter", "crds"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				return "", "", fmt.Errorf("$%s: %w", kedaEnv, err)
			}
		}
		return d, "", nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	script := filepath.Join(root, "hack", "keda.sh")
	if d, err := runScript(script, "--check"); err == nil {
		return d, "", nil
	}
	if !InCI() {
		return "", "keda: skipped because TERN_KEDA and CI are unset and hack/keda.sh has not " +
			"built KEDA; to run this test: hack/keda.sh", nil
	}
	fmt.Fprintln(os.Stderr, "keda: building KEDA with hack/keda.sh")
	d, err := runScript(script)
	if err != nil {
		return "", "", err
	}
	return d, "", nil
}
