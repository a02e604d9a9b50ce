package tlsrecord

import (
	"crypto/tls"
	"testing"
)

// FuzzOpen feeds any bytes to a connection's reader side as the record
// that follows in its stream: RecordLen, Open and, for a handshake record,
// HandleHandshake must answer with a record's length or an error, never
// panic, and never return a plaintext outside the record. The seeds are
// records sealed under the keys the fuzz target opens with (so mutations
// of them reach past authentication only where the fuzzer keeps the tag),
// and the corpus in testdata/fuzz/FuzzOpen.
func FuzzOpen(f *testing.F) {
	cs, ss := testSecrets[0], testSecrets[1]
	seal := func(typ byte, p []byte) []byte { return sealFirst(f, typ, p) }
	f.Add(seal(ContentAppData, []byte("\x40\x00\x00\x04ping")))
	f.Add(seal(ContentHandshake, []byte{typeKeyUpdate, 0, 0, 1, 1}))
	f.Add(seal(ContentHandshake, []byte{typeKeyUpdate, 0, 0, 1}))
	f.Add(seal(ContentAlert, []byte{1, 0}))
	f.Add(seal(0, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := New(tls.TLS_AES_128_GCM_SHA256, cs, ss, false)
		if err != nil {
			t.Fatal(err)
		}
		n, err := RecordLen(b)
		if err != nil || n == 0 || n > len(b) {
			return
		}
		typ, p, err := r.Open(b[:n])
		if err != nil {
			return
		}
		if len(p) > n-Overhead {
			t.Fatalf("plaintext of %d bytes from a record of %d", len(p), n)
		}
		if typ == ContentHandshake {
			_, _ = r.HandleHandshake(p)
		}
	})
}
