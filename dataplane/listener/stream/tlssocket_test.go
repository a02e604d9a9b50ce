package stream

import "testing"

// TestRecordScan: whole records are counted across any cut of the stream,
// and a scan that starts inside a record (its "header" not a TLS record
// header) is lost and counts nothing more.
func TestRecordScan(t *testing.T) {
	rec := func(body int) []byte {
		b := make([]byte, 5+body)
		b[0], b[1], b[2], b[3], b[4] = 23, 3, 3, byte(body>>8), byte(body)
		return b
	}
	var stream []byte
	for _, n := range []int{0, 1, 40, 300, 16384} {
		stream = append(stream, rec(n)...)
	}
	for _, tc := range []struct {
		name     string
		in       []byte
		want     uint64
		wantLost bool
	}{
		{"aligned", stream, 5, false},
		{"a header cut short at the end", append(append([]byte{}, stream...), 23, 3), 5, false},
		{"starting inside a record", append([]byte{0xab, 0xcd, 0x01, 0x02, 0x03, 0x04}, stream...), 0, true},
		{"a record past the largest", append(rec(40), 23, 3, 3, 0xff, 0xff), 1, true},
	} {
		for _, cut := range []int{1, 3, 7, 1 << 20} {
			var r recordScan
			var got uint64
			for b := tc.in; len(b) > 0; {
				k := min(cut, len(b))
				got += r.scan(b[:k])
				b = b[k:]
			}
			if got != tc.want || r.lost != tc.wantLost {
				t.Errorf("%s, pieces of %d bytes: %d records, lost %v; want %d, lost %v", tc.name, cut, got, r.lost, tc.want, tc.wantLost)
			}
		}
	}
}
