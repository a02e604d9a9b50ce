package record

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
)

// TestStateHandOver moves a server's records to a new Records (FromState)
// mid-association: the client opens what the new one seals (with higher
// sequence numbers), the new one opens the client's next records and
// refuses one the old already opened, and its close_notify opens too.
func TestStateHandOver(t *testing.T) {
	in := Inputs{master: bytes.Repeat([]byte{7}, 48), suite: 0xc02f, epoch: 1, seq: 3}
	_, _ = rand.Read(in.clientRandom[:])
	_, _ = rand.Read(in.serverRandom[:])
	old, err := New(in)
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient(in)
	if err != nil {
		t.Fatal(err)
	}
	var seen []byte
	for range 3 {
		rec, _ := client.Seal(nil, []byte("to server"))
		seen = append([]byte(nil), rec...)
		if _, ok := old.Open(rec); !ok {
			t.Fatal("old server: open failed")
		}
		rec, _ = old.Seal(nil, []byte("to client"))
		if _, ok := client.Open(rec); !ok {
			t.Fatal("client: open failed")
		}
	}
	st := old.State()
	moved, err := FromState(st, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if moved.NextSeq() != st.NextSeq+1<<16 {
		t.Errorf("NextSeq = %d, want %d", moved.NextSeq(), st.NextSeq+1<<16)
	}
	if _, ok := moved.Open(seen); ok {
		t.Error("a record the old server opened opened again after the hand-over")
	}
	rec, _ := client.Seal(nil, []byte("next"))
	if p, ok := moved.Open(rec); !ok || string(p) != "next" {
		t.Errorf("moved: open = %v, %q", ok, p)
	}
	rec, _ = moved.Seal(nil, []byte("reply"))
	if p, ok := client.Open(rec); !ok || string(p) != "reply" {
		t.Errorf("client: open of the moved server's record = %v, %q", ok, p)
	}
	alert, _ := moved.SealType(nil, ContentAlert, CloseNotify)
	if p, ok := client.Open(alert); !ok || !bytes.Equal(p, CloseNotify) {
		t.Errorf("client: open of close_notify = %v, %x", ok, p)
	}
}

func TestFromStateRefuses(t *testing.T) {
	k := bytes.Repeat([]byte{1}, 16)
	good := State{Suite: 0xc02b, Epoch: 1, LocalKey: k, RemoteKey: k, NextSeq: 5}
	for _, tc := range []struct {
		name string
		edit func(*State)
		want string
	}{
		{"suite", func(s *State) { s.Suite = 0x00ae }, "suite"},
		{"key length", func(s *State) { s.LocalKey = k[:5] }, "keys"},
		{"epoch", func(s *State) { s.Epoch = 0 }, "epoch"},
		{"sequence", func(s *State) { s.NextSeq = maxSeq }, "sequence"},
		{"window", func(s *State) { s.ReplayTop = maxSeq + 2 }, "replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := good
			tc.edit(&st)
			if _, err := FromState(st, 1<<16); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromState = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if _, err := FromState(good, 1<<16); err != nil {
		t.Errorf("FromState(good) = %v", err)
	}
}
