package record

import "testing"

// TestHandshakeKeysIncomplete: without a key log line or a ServerHello no
// keys are derived (the association stays on pion's Conn).
func TestHandshakeKeysIncomplete(t *testing.T) {
	var k Keys
	if _, err := k.Inputs(); err == nil {
		t.Fatal("inputs of an empty handshake succeeded")
	}
	if _, err := k.Write([]byte("CLIENT_RANDOM 00 11\n")); err == nil {
		t.Fatal("a short client random was taken")
	}
	k.Observe([]byte{22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 1, 0, 200}) // truncated record
	if _, err := k.Inputs(); err == nil {
		t.Fatal("inputs without a ServerHello succeeded")
	}
}

// FuzzHandshakeKeys: the key log and record parsers never panic on what
// pion (or anything through the association) writes.
func FuzzHandshakeKeys(f *testing.F) {
	f.Add([]byte("CLIENT_RANDOM 0011 2233\n"), []byte{22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14, 2, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0xfe, 0xfd})
	f.Fuzz(func(t *testing.T, keyLog, datagram []byte) {
		var k Keys
		_, _ = k.Write(keyLog)
		k.Observe(datagram)
		if in, err := k.Inputs(); err == nil {
			_, _ = New(in)
		}
	})
}
