package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Ternd returns the path of a ternd binary for tests that run it as a
// process: $TERND_BIN when set, else one built from this module into a
// temporary directory of tb. A failed build fails tb.
func Ternd(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("TERND_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(tb.TempDir(), "ternd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/tern-gw/tern/cmd/ternd").CombinedOutput()
	if err != nil {
		tb.Fatalf("building ternd: %v\n%s", err, out)
	}
	return bin
}
