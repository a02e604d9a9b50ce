// Package testenv runs tests against a real kube-apiserver and etcd (controller-runtime's
// envtest), built from the Go module proxy by hack/envtest.sh. It exists so that every package
// with API-server tests finds the binaries, configures the API server and decides to skip the
// same way. It also holds what several test packages share beyond the API server: the skip
// policy (skip.go), Mimir and KEDA builds, network namespaces, and Chromium's relay-call page
// (chromium.go, used by test/e2e and test/cluster).
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// assetsEnv is the variable envtest reads the binaries' directory from.
const assetsEnv = "KUBEBUILDER_ASSETS"

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsSkip string
	assetsErr  error
)

// Assets returns the directory that holds kube-apiserver and etcd, and sets KUBEBUILDER_ASSETS
// to it for envtest. The order is: KUBEBUILDER_ASSETS if set; the cache of hack/envtest.sh if
// it is already filled; under CI, a build by hack/envtest.sh (minutes when cold). Outside CI
// with nothing built it skips tb with the command that builds the binaries; under CI a missing
// binary fails tb, so CI can never pass by skipping.
func Assets(tb testing.TB) string {
	tb.Helper()
	assetsOnce.Do(func() { assetsDir, assetsSkip, assetsErr = findAssets() })
	if assetsErr != nil {
		tb.Fatalf("envtest assets: %v", assetsErr)
	}
	if assetsSkip != "" {
		SkipOrFail(tb, "%s", assetsSkip)
	}
	return assetsDir
}

// findAssets implements Assets' order. It returns the directory, or a skip message, or an error.
func findAssets() (dir, skip string, err error) {
	if d := os.Getenv(assetsEnv); d != "" {
		return d, "", nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	script := filepath.Join(root, "hack", "envtest.sh")
	if d, err := runScript(script, "--check"); err == nil {
		return d, "", os.Setenv(assetsEnv, d)
	}
	if !InCI() {
		return "", "envtest: skipped because KUBEBUILDER_ASSETS and CI are unset and " +
			"hack/envtest.sh has not built kube-apiserver and etcd yet; to run these tests: " +
			"export KUBEBUILDER_ASSETS=\"$(hack/envtest.sh)\"", nil
	}
	fmt.Fprintln(os.Stderr, "envtest: KUBEBUILDER_ASSETS unset under CI; building with hack/envtest.sh (minutes when cold)")
	d, err := runScript(script)
	if err != nil {
		return "", "", err
	}
	return d, "", os.Setenv(assetsEnv, d)
}

// runScript runs hack/envtest.sh with args and returns the directory it prints. The script's
// progress (stderr) is passed through so a slow cold build shows what it is doing.
func runScript(script string, args ...string) (string, error) {
	cmd := exec.Command(script, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if len(args) == 0 {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w", script, strings.Join(args, " "), err)
	}
	d := strings.TrimSpace(out.String())
	if d == "" {
		return "", errors.New(script + " printed no directory")
	}
	return d, nil
}

// InCI reports whether CI is set to anything but "" or "false", the way CI systems announce
// themselves.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false"
}

// RepoRoot returns the directory of the go.mod above the working directory (tests run in their
// package's directory).
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no go.mod above the working directory")
		}
		d = parent
	}
}
