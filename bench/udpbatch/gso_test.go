package udpbatch

import (
	"errors"
	"testing"
)

// TestGSOSegments: which buffers one GSO send takes, and how many
// datagrams they make.
func TestGSOSegments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		len, seg  int
		want      int
		wantError bool
	}{
		{"one datagram", 104, 104, 1, false},
		{"32 equal", 32 * 104, 104, 32, false},
		{"shorter last", 3*104 + 40, 104, 4, false},
		{"64 segments", 64 * 100, 100, 64, false},
		{"65 segments", 65 * 100, 100, 0, true},
		{"over 65000 bytes", 40 * 1700, 1700, 0, true},
		{"empty", 0, 100, 0, true},
		{"zero segment size", 100, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := gsoSegments(make([]byte, tc.len), tc.seg)
			if tc.wantError {
				if !errors.Is(err, ErrGSO) {
					t.Fatalf("error %v, want ErrGSO", err)
				}
				return
			}
			if err != nil || n != tc.want {
				t.Fatalf("%d segments, %v; want %d", n, err, tc.want)
			}
		})
	}
}
