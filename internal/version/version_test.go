package version

import (
	"strings"
	"testing"
)

func TestTag(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "dev"},
		{"v0.1.0", "v0.1.0"},
		{"v0.1.0-3-g1234abc-dirty", "v0.1.0-3-g1234abc-dirty"},
		{"v0.0.0-20260101000000-abcdef+dirty", "v0.0.0-20260101000000-abcdef-dirty"},
		{".hidden", "_hidden"},
		{"a/b c", "a-b-c"},
		{strings.Repeat("x", 200), strings.Repeat("x", 128)},
	}
	for _, tt := range tests {
		if got := Tag(tt.in); got != tt.want {
			t.Errorf("Tag(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStringStamped(t *testing.T) {
	v, r := Version, Revision
	t.Cleanup(func() { Version, Revision = v, r })
	Version, Revision = "v1.2.3", "0123abcd"
	if got, want := String("ternd"), "ternd v1.2.3 (0123abcd)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := ImageTag(); got != "v1.2.3" {
		t.Errorf("ImageTag = %q", got)
	}
}
