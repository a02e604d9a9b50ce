package loglevel

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestUnknownScopes(t *testing.T) {
	got := UnknownScopes("all:INFO,turn:DEBUG,ice:TRACE,dtls:INFO,ice:DEBUG,Stunner:INFO")
	if want := []string{"ice", "dtls"}; !slices.Equal(got, want) {
		t.Errorf("UnknownScopes = %q, want %q", got, want)
	}
	if got := UnknownScopes("debug"); got != nil {
		t.Errorf("UnknownScopes(debug) = %q, want none", got)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"debug": slog.LevelDebug, "DEBUG": slog.LevelDebug, "info": slog.LevelInfo, "Info": slog.LevelInfo,
		"warn": slog.LevelWarn, "warning": slog.LevelWarn, "WARNING": slog.LevelWarn, "error": slog.LevelError,
		"all:INFO": slog.LevelInfo, "all:DEBUG": slog.LevelDebug, "all:ERROR": slog.LevelError,
		"all:DEBUG,turn:INFO": slog.LevelDebug, "turn:INFO,all:WARN": slog.LevelInfo, "ice:INFO,all:WARN": slog.LevelWarn,
		"all:debug, turn:info": slog.LevelDebug, "ALL:warn": slog.LevelWarn,
		// A scope ternd has makes it more verbose, never less (one logger).
		"turn:DEBUG": slog.LevelDebug, "all:INFO,turn:DEBUG": slog.LevelDebug, "all:DEBUG,turn:ERROR": slog.LevelDebug,
		"all:INFO,stunner:TRACE": Trace,
		// Scopes ternd lacks are checked for syntax only.
		"all:WARN,ice:DEBUG": slog.LevelWarn, "dtls:TRACE": slog.LevelInfo,
		"trace": Trace, "all:TRACE": Trace, "all:DISABLE": Disable, "off": Disable,
		"all:DISABLE,turn:ERROR": slog.LevelError,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "verbose", "all", "all:", ":INFO", "all:INFO,", "all:INFO,turn", "all:LOUD", "all:INFO,turn:LOUD", "info:"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want error", in, got)
		}
	}
}

// FuzzParseLogLevel checks STUNner's log-level syntax ("all:INFO,turn:DEBUG", or a bare
// level): Parse never panics, returns one of the six levels it knows, ignores the case
// of ASCII letters, and agrees with UnknownScopes, whose answer is the scopes of s that are
// not Scopes, once each. Seeds: testdata/fuzz/FuzzParseLogLevel.
func FuzzParseLogLevel(f *testing.F) {
	f.Add("all:INFO,turn:DEBUG")
	f.Fuzz(func(t *testing.T, s string) {
		unknown := UnknownScopes(s)
		seen := map[string]bool{}
		for _, sc := range unknown {
			if sc == "" || seen[sc] || knownScope(sc) || !strings.Contains(s, sc+":") {
				t.Fatalf("UnknownScopes(%q) = %q: %q is empty, repeated, known or not a scope of s", s, unknown, sc)
			}
			seen[sc] = true
		}
		l, err := Parse(s)
		if err != nil {
			return
		}
		switch l {
		case Trace, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, Disable:
		default:
			t.Fatalf("Parse(%q) = %v, not a level it names", s, l)
		}
		up := strings.Map(func(r rune) rune {
			if 'a' <= r && r <= 'z' {
				return r - 'a' + 'A'
			}
			return r
		}, s)
		if l2, err := Parse(up); err != nil || l2 != l {
			t.Fatalf("Parse(%q) = %v, %v; but %q gave %v", up, l2, err, s, l)
		}
	})
}
