package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/loglevel"
)

// TestStunnerdArgs parses the arguments STUNner's operator, Helm charts and
// docs give stunnerd, in both spellings, and ternd's Go-flag spellings.
func TestStunnerdArgs(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(*flags) bool
	}{
		{[]string{"-w", "--udp-thread-num=16"}, func(f *flags) bool { return f.watch && f.threads == 16 }},
		{[]string{"-w", "-c", "file://etc/stunnerd/stunnerd.conf", "--udp-thread-num=16"}, func(f *flags) bool {
			return f.watch && f.cfgPath == "file://etc/stunnerd/stunnerd.conf" && f.threads == 16
		}},
		{[]string{"--watch", "--config=/x.conf", "-u", "4", "--log-format", "json", "-l", "all:INFO,turn:DEBUG"}, func(f *flags) bool {
			return f.watch && f.cfgPath == "/x.conf" && f.threads == 4 && f.logFormat == "json" && f.level == "all:INFO,turn:DEBUG"
		}},
		{[]string{"-v", "-d", "-i", "ns/gw", "--force-ready-status", "--log", "all:TRACE"}, func(f *flags) bool {
			return f.verbose && f.id == "ns/gw" && f.level == "all:TRACE"
		}},
		{[]string{"--verbose", "--dry-run", "--id=ns/gw", "--cds-server-address", "1.2.3.4:13478", "-n", "stunner", "--sni", "x"}, func(f *flags) bool {
			return f.verbose && f.id == "ns/gw"
		}},
		// ternd's earlier Go-flag spellings.
		{[]string{"-c", "/t.yaml", "-udp-thread-num=2", "-relay-thread-num", "3", "-gso=false", "--w", "-grace-period=5s", "-f", ""}, func(f *flags) bool {
			return f.cfgPath == "/t.yaml" && f.threads == 2 && f.relays == 3 && !f.gso && f.watch && f.grace.Seconds() == 5
		}},
		{[]string{"-c", "/t.yaml", "--state-budget-mib", "64"}, func(f *flags) bool { return f.stateBudgetMiB == 64 }},
		{[]string{"-c", "/t.yaml", "--state-budget-mib=-1"}, func(f *flags) bool { return f.stateBudgetMiB == -1 }},
		{[]string{"-c", "/t.yaml", "--memory-limit-mib", "512"}, func(f *flags) bool { return f.memoryLimitMiB == 512 }},
	} {
		f := newFlags()
		var out, errw bytes.Buffer
		if code := f.parse(tc.args, &out, &errw); code != -1 {
			t.Errorf("%q: exit %d: %s", tc.args, code, errw.String())
			continue
		}
		if !tc.check(f) {
			t.Errorf("%q: parsed %+v", tc.args, f)
		}
	}
}

func TestHelpAndBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}} {
		var out, errw bytes.Buffer
		if code := newFlags().parse(args, &out, &errw); code != 0 || !strings.Contains(out.String(), "--udp-thread-num") {
			t.Errorf("%q: exit %d, stdout %q", args, code, out.String())
		}
	}
	for _, args := range [][]string{{"--log-format", "xml"}, {"--no-such-flag"}, {"-u", "many"}} {
		var out, errw bytes.Buffer
		if code := newFlags().parse(args, &out, &errw); code != 2 || errw.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errw.String())
		}
	}
	if code := run([]string{"--version"}); code != 0 {
		t.Errorf("--version: exit %d", code)
	}
	if code := run([]string{"-c", "k8s"}); code != 2 {
		t.Errorf("-c k8s: exit %d, want 2", code)
	}
}

func TestLogIgnored(t *testing.T) {
	f := newFlags()
	if code := f.parse([]string{"-d", "--force-ready-status", "-w"}, io.Discard, io.Discard); code != -1 {
		t.Fatal(code)
	}
	var buf bytes.Buffer
	f.logIgnored(slog.New(slog.NewTextHandler(&buf, nil)))
	got := buf.String()
	for _, want := range []string{"ignoring stunnerd flag --dry-run", "ignoring stunnerd flag --force-ready-status"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
	if strings.Count(got, "\n") != 2 {
		t.Errorf("want two lines, got %q", got)
	}
}

func TestLogLevelAndFormat(t *testing.T) {
	cfg := &config.Config{Admin: config.Admin{LogLevel: "warn"}}
	for _, tc := range []struct {
		args      []string
		want      string
		fromFlags bool
	}{
		{nil, "warn", false},
		{[]string{"-v"}, "all:DEBUG", true},
		{[]string{"-v", "-l", "all:ERROR"}, "all:ERROR", true},
	} {
		f := newFlags()
		f.parse(tc.args, io.Discard, io.Discard)
		if got, ff := f.logLevel(cfg); got != tc.want || ff != tc.fromFlags {
			t.Errorf("%q: %q %v", tc.args, got, ff)
		}
	}
	var buf bytes.Buffer
	lvl := new(slog.LevelVar)
	lvl.Set(loglevel.Trace)
	newLogger("json", &buf, lvl).Log(t.Context(), loglevel.Trace, "hello")
	if !strings.Contains(buf.String(), `"level":"TRACE"`) || !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("json trace line %q", buf.String())
	}
}

func TestNormalizeArgs(t *testing.T) {
	fs := newFlags().fs
	in := []string{"-udp-thread-num=16", "-gateway", "ns/gw", "--w", "-w", "-lall:DEBUG", "-l", "-x", "--", "-gso"}
	want := []string{"--udp-thread-num=16", "--gateway", "ns/gw", "-w", "-w", "-lall:DEBUG", "-l", "-x", "--", "-gso"}
	if got := normalizeArgs(fs, in); !slices.Equal(got, want) {
		t.Errorf("normalizeArgs = %q, want %q", got, want)
	}
}

func TestConfigPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "stunnerd.conf")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		file:             file,
		"file://" + file: file,
		// The Helm chart's spelling, file://etc/...: stunnerd reads it as absolute.
		"file://" + file[1:]:      file,
		"relative/does-not-exist": "relative/does-not-exist",
	} {
		if got, err := configPath(in); err != nil || got != want {
			t.Errorf("configPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"k8s", "http://stunner-config-discovery.stunner-system:13478", "ws://1.2.3.4:13478", "10.0.0.1:13478"} {
		if got, err := configPath(in); err == nil || !strings.Contains(err.Error(), "config discovery service") {
			t.Errorf("configPath(%q) = %q, %v; want a CDS error", in, got, err)
		}
	}
}

// TestConfigOriginEnv: STUNNER_CONFIG_ORIGIN, which STUNner's and Tern's dataplane pods
// carry, is read only when the command line names no config, as stunnerd reads it; with
// -c, -f or a TURN URI it is ignored whatever it holds (STUNner's CDS address included).
func TestConfigOriginEnv(t *testing.T) {
	for _, tc := range []struct {
		name, origin string
		args         []string
		wantPath     string
		wantFromEnv  bool
	}{
		{"no config on the command line", "file:///etc/tern/config/tern.yaml", []string{"-w"}, "file:///etc/tern/config/tern.yaml", true},
		{"-c wins over a CDS origin", "http://10.0.0.1:13478", []string{"-w", "-c", "/etc/tern/config/tern.yaml"}, "/etc/tern/config/tern.yaml", false},
		{"-c wins over a file origin", "file:///other.conf", []string{"--config=/x.yaml"}, "/x.yaml", false},
		{"-f wins", "http://10.0.0.1:13478", []string{"-f", "gw.yaml"}, "", false},
		{"a TURN URI wins", "http://10.0.0.1:13478", []string{"turn://u:p@127.0.0.1:3478"}, "", false},
		{"unset", "", []string{"-w"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envConfigOrigin, tc.origin)
			f := newFlags()
			var out, errw bytes.Buffer
			if code := f.parse(tc.args, &out, &errw); code != -1 {
				t.Fatalf("exit %d: %s", code, errw.String())
			}
			if f.cfgPath != tc.wantPath || f.cfgFromEnv != tc.wantFromEnv {
				t.Errorf("config %q (from $%s: %v), want %q (%v)", f.cfgPath, envConfigOrigin, f.cfgFromEnv, tc.wantPath, tc.wantFromEnv)
			}
		})
	}
}
