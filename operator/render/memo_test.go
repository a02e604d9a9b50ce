package render

import (
	"os"
	"testing"
)

// TestMemoForgets: a Memo holds what the last two Renders used, however many Renders of
// other inputs came before, so its size follows the Gateways, not the changes.
func TestMemoForgets(t *testing.T) {
	load := func(path string) *Input {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		in, _, err := Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	a := load("testdata/alternates_hostnetwork.in.yaml")
	b := load("testdata/alternates_pod_network.in.yaml")
	m := &Memo{}
	size := func() int { return len(m.cur) + len(m.prev) }
	Render(a, Options{Memo: m})
	na := size()
	if na == 0 {
		t.Fatal("the Memo kept nothing")
	}
	Render(b, Options{Memo: m})
	Render(b, Options{Memo: m})
	// a's entries are gone; only b's, in both generations at most.
	if got := size(); got > 2*len(m.cur) || len(m.cur) == 0 {
		t.Errorf("after two renders of another input: cur %d, prev %d entries", len(m.cur), len(m.prev))
	}
	for range 10 {
		Render(b, Options{Memo: m})
	}
	if got := len(m.cur); got != len(m.prev) {
		t.Errorf("steady state: cur %d, prev %d entries, want equal", got, len(m.prev))
	}
}
