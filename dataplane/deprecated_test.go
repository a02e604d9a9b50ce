package dataplane

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestWarnDeprecated: limits.legacyChannelNumbers still loads (scripts and
// BENCHMARKS.md set it) and logs one deprecation line; unset, nothing.
func TestWarnDeprecated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy bool
		want   string
	}{
		{"legacyChannelNumbers set", true, "limits.legacyChannelNumbers is deprecated"},
		{"unset", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			cfg := &config.Config{Limits: config.Limits{LegacyChannelNumbers: tc.legacy}}
			warnDeprecated(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
			got := buf.String()
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) || strings.Count(got, "\n") > 1 {
				t.Fatalf("logged %q, want one line containing %q", got, tc.want)
			}
		})
	}
}
