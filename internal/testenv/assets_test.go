package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInCI(t *testing.T) {
	tests := []struct {
		val  string
		want bool
	}{{"", false}, {"false", false}, {"true", true}, {"1", true}}
	for _, tt := range tests {
		t.Setenv("CI", tt.val)
		if got := InCI(); got != tt.want {
			t.Errorf("CI=%q: InCI() = %v, want %v", tt.val, got, tt.want)
		}
	}
}

func TestFindAssetsFromEnv(t *testing.T) {
	t.Setenv(assetsEnv, "/opt/envtest")
	dir, skip, err := findAssets()
	if dir != "/opt/envtest" || skip != "" || err != nil {
		t.Errorf("findAssets() = %q, %q, %v; want KUBEBUILDER_ASSETS", dir, skip, err)
	}
}

func TestRunScript(t *testing.T) {
	tests := []struct {
		name, body string
		want       string
		wantErr    bool
	}{
		{"prints the directory", "echo /cache/envtest/1.37.1; echo progress >&2", "/cache/envtest/1.37.1", false},
		{"prints nothing", "true", "", true},
		{"fails", "echo /half; exit 1", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "envtest.sh")
			if err := os.WriteFile(script, []byte("#!/bin/sh\n"+tt.body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := runScript(script, "--check")
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("runScript = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// tbRecorder records what SkipOrFail asks of a test instead of ending it, so both outcomes can
// be checked from one test.
type tbRecorder struct {
	testing.TB
	skipped, failed string
}

func (r *tbRecorder) Helper()                        {}
func (r *tbRecorder) Skip(args ...any)               { r.skipped = fmt.Sprint(args...) }
func (r *tbRecorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestSkipOrFail(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{{"", false}, {"false", false}, {"true", true}, {"1", true}} {
		t.Setenv("CI", tc.ci)
		r := &tbRecorder{TB: t}
		Require(r, "turnserver", errors.New("not found"))
		got := r.skipped
		if tc.wantFail {
			got = r.failed
		}
		if !strings.Contains(got, "turnserver: not found") || (r.failed != "") == (r.skipped != "") || (r.failed != "") != tc.wantFail {
			t.Errorf("CI=%q: skipped %q, failed %q; want the reason, and a failure only under CI", tc.ci, r.skipped, r.failed)
		}
		r = &tbRecorder{TB: t}
		Require(r, "turnserver", nil)
		if r.skipped != "" || r.failed != "" {
			t.Errorf("CI=%q: Require with no error skipped %q, failed %q", tc.ci, r.skipped, r.failed)
		}
	}
}
