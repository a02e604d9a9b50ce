package record

import (
	"bytes"
	"crypto/rand"
	"testing"
)

// recordPair returns a server's record layer and the mirror a client
// would hold (its keys and IVs swapped), on epoch 1.
func recordPair(t testing.TB) (server, client *Records) {
	t.Helper()
	k1, k2 := make([]byte, 16), make([]byte, 16)
	_, _ = rand.Read(k1)
	_, _ = rand.Read(k2)
	mk := func(local, remote []byte, liv, riv [4]byte) *Records {
		r := &Records{epoch: 1, localIV: liv, remoteIV: riv}
		var err error
		if r.local, err = newGCM(local); err != nil {
			t.Fatal(err)
		}
		if r.remote, err = newGCM(remote); err != nil {
			t.Fatal(err)
		}
		return r
	}
	return mk(k1, k2, [4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}), mk(k2, k1, [4]byte{5, 6, 7, 8}, [4]byte{1, 2, 3, 4})
}

func TestGCMRecordsSealOpen(t *testing.T) {
	server, client := recordPair(t)
	for _, size := range []int{0, 1, 100, 1200} {
		p := bytes.Repeat([]byte{byte(size)}, size)
		rec, err := server.Seal(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec) != Header+gcmOverhead+size || rec[0] != ContentAppData {
			t.Fatalf("size %d: record of %d bytes, type %d", size, len(rec), rec[0])
		}
		got, ok := client.Open(append([]byte(nil), rec...))
		if !ok || !bytes.Equal(got, p) {
			t.Fatalf("size %d: open = %v, %x", size, ok, got)
		}
		// The same record again is a replay.
		if _, ok := client.Open(append([]byte(nil), rec...)); ok {
			t.Fatalf("size %d: a replayed record opened", size)
		}
		// A flipped bit fails authentication.
		rec[len(rec)-1] ^= 1
		if _, ok := client.Open(rec); ok {
			t.Fatalf("size %d: a forged record opened", size)
		}
	}
}

func TestReplayWindow(t *testing.T) {
	tests := []struct {
		name  string
		marks []uint64
		seq   uint64
		fresh bool
	}{
		{"empty", nil, 0, true},
		{"seen", []uint64{0}, 0, false},
		{"next", []uint64{0}, 1, true},
		{"gap inside", []uint64{0, 2}, 1, true},
		{"seen inside", []uint64{1, 5}, 1, false},
		{"oldest in window", []uint64{0, 64}, 1, true},
		{"below window", []uint64{100}, 36, false},
		{"far ahead", []uint64{3}, 1 << 40, true},
		{"after a jump", []uint64{3, 1000}, 3, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w replayWindow
			for _, s := range tc.marks {
				w.mark(s)
			}
			if got := w.fresh(tc.seq); got != tc.fresh {
				t.Fatalf("fresh(%d) after %v = %v, want %v", tc.seq, tc.marks, got, tc.fresh)
			}
		})
	}
}

// FuzzGCMOpen feeds arbitrary records to open: it must never panic, and
// nothing but a record sealed with the peer's key may open.
func FuzzGCMOpen(f *testing.F) {
	server, _ := recordPair(f)
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{23}, Header+gcmOverhead))
	f.Add([]byte{23, 0xfe, 0xfd, 0, 1, 0, 0, 0, 0, 0, 1, 0, 30})
	f.Fuzz(func(t *testing.T, rec []byte) {
		if p, ok := server.Open(rec); ok {
			t.Fatalf("an unsealed record opened: %x", p)
		}
	})
}

// TestNewClient derives both ends of one association from the same
// inputs: what each seals, the other opens, in both directions.
func TestNewClient(t *testing.T) {
	in := Inputs{master: bytes.Repeat([]byte{7}, 48), suite: 0xc02b, epoch: 1, seq: 3}
	_, _ = rand.Read(in.clientRandom[:])
	_, _ = rand.Read(in.serverRandom[:])
	server, err := New(in)
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		from, to *Records
	}{{"server to client", server, client}, {"client to server", client, server}} {
		rec, err := tc.from.Seal(nil, []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := tc.to.Open(rec); !ok || string(got) != "hello" {
			t.Errorf("%s: open = %v, %q", tc.name, ok, got)
		}
	}
}
