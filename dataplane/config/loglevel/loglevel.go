// Package loglevel reads the dataplane's log level, admin.logLevel of the
// config (and ternd's -l, tern-operator's --log-level): a bare level name
// or STUNner's per-scope form "all:INFO,turn:DEBUG", mapped to a
// slog.Level. The config validates admin.logLevel with Parse, ternd and
// tern-operator set their loggers' level with it, and the renderer checks
// a GatewayConfig's logLevel with it, so all of them accept the same
// spellings. It imports nothing of Tern.
package loglevel

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Log levels beyond slog's four, for STUNner's TRACE and DISABLE.
const (
	// Trace is below debug: ternd's trace messages, STUNner's TRACE.
	Trace = slog.LevelDebug - 4
	// Disable is above every level anything logs at, so nothing passes.
	Disable = slog.Level(1 << 20)
)

// Scopes are STUNner's logger names that stand for parts of ternd. Tern
// logs through one logger, so a scope here can only make all of it more
// verbose: "all:INFO,turn:DEBUG" gives debug logging (which the user asked
// for the TURN path, the bulk of what ternd logs), while
// "all:DEBUG,turn:ERROR" cannot quiet one part and stays at debug.
var Scopes = []string{"all", "stunner", "stunnerd", "turn", "auth", "listener", "cluster", "relay", "admin", "config"}

// Parse maps a log level to a slog.Level. It takes one of trace,
// debug, info, warn (or warning), error and disable (or off, none),
// case-insensitively, or STUNner's per-scope form "all:INFO" /
// "all:INFO,turn:DEBUG". In that form the "all" entry sets the level
// (info without one), and an entry for another of Scopes lowers it when
// more verbose; entries for scopes ternd does not have are checked for
// syntax only (UnknownScopes names them). Anything else is an error.
func Parse(s string) (slog.Level, error) {
	if !strings.Contains(s, ":") {
		return parseName(s)
	}
	level, finest := slog.LevelInfo, Disable
	for entry := range strings.SplitSeq(s, ",") {
		scope, name, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok || scope == "" {
			return 0, fmt.Errorf("invalid log level %q: want scope:LEVEL entries, got %q", s, entry)
		}
		l, err := parseName(name)
		if err != nil {
			return 0, fmt.Errorf("invalid log level %q: scope %q: %w", s, scope, err)
		}
		switch {
		case strings.EqualFold(scope, "all"):
			level = l
		case knownScope(scope):
			finest = min(finest, l)
		}
	}
	return min(level, finest), nil
}

// UnknownScopes returns the scopes of a "scope:LEVEL,..." log level that
// are not among Scopes, in order and once each, for ternd to say once
// that it ignores them.
func UnknownScopes(s string) []string {
	var out []string
	for entry := range strings.SplitSeq(s, ",") {
		scope, _, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if ok && scope != "" && !knownScope(scope) && !slices.Contains(out, scope) {
			out = append(out, scope)
		}
	}
	return out
}

func knownScope(s string) bool {
	return slices.ContainsFunc(Scopes, func(k string) bool { return strings.EqualFold(k, s) })
}

func parseName(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace":
		return Trace, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "disable", "off", "none":
		return Disable, nil
	}
	return 0, fmt.Errorf("unknown log level %q: want trace, debug, info, warn, error or disable", s)
}
