package testenv

import (
	"fmt"
	"os"
	"testing"
)

// Require does nothing when err is nil. Otherwise the dependency what (a binary, the envtest
// assets, a kernel feature, root) is missing, and the test is skipped or failed as SkipOrFail
// decides. Typical use:
//
//	path, err := exec.LookPath("turnserver")
//	testenv.Require(t, "turnserver (hack/test-deps.sh installs coturn)", err)
func Require(tb testing.TB, what string, err error) {
	tb.Helper()
	if err != nil {
		SkipOrFail(tb, "%s: %v", what, err)
	}
}

// SkipOrFail is the one way a test gives up because something it needs is missing. On a
// developer's machine it skips, with the reason, so `go test ./...` works without every tool
// installed. Under CI (InCI) it fails instead: CI installs every dependency, so a missing one
// there is a broken setup, and a skip would let CI pass without running the test.
func SkipOrFail(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatalf("%s (CI=%s: a missing test dependency fails the test instead of skipping it)", msg, os.Getenv("CI"))
	} else {
		tb.Skip(msg + " (skipped because CI is unset; under CI this fails)")
	}
}
