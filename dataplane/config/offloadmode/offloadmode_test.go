package offloadmode

import "testing"

func TestNormalize(t *testing.T) {
	engines := []struct{ in, want, err string }{
		{"", None, ""}, {"none", None, ""}, {"AUTO", Auto, ""}, {"xdp", XDP, ""},
		{"tc", TC, ""}, {"TCMux", TC, ""}, // STUNner's TCMux is tc
		{"ebpf", "", `must be None, Auto, XDP or TC, got "ebpf"`},
	}
	for _, c := range engines {
		got, err := NormalizeEngine(c.in)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("NormalizeEngine(%q) = %q, %v; want %q, %q", c.in, got, err, c.want, c.err)
		}
	}
	attaches := []struct{ in, want, err string }{
		{"", AttachAuto, ""}, {"tcx", AttachTCX, ""}, {"CLSACT", AttachClsact, ""},
		{"tc", "", `must be Auto, TCX or Clsact, got "tc"`},
	}
	for _, c := range attaches {
		got, err := NormalizeAttach(c.in)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("NormalizeAttach(%q) = %q, %v; want %q, %q", c.in, got, err, c.want, c.err)
		}
	}
	// Unset means Auto; a misspelling falls back safely (Validate reports it).
	if m := (Settings{}).EngineMode(); m != Auto {
		t.Errorf("unset engine: %q, want Auto", m)
	}
	if m := (Settings{Engine: "bogus"}).EngineMode(); m != None {
		t.Errorf("invalid engine: %q, want None", m)
	}
	if m := (Settings{Attach: "bogus"}).AttachMode(); m != AttachAuto {
		t.Errorf("invalid attach: %q, want Auto", m)
	}
}
