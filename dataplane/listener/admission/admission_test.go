package admission

import (
	"net/netip"
	"testing"
)

type conn struct {
	name      string
	allocated bool
}

func TestAdmit(t *testing.T) {
	a1 := netip.MustParseAddr("192.0.2.1")
	a2 := netip.MustParseAddr("192.0.2.2")
	v6a := netip.MustParseAddr("2001:db8::1")
	v6b := netip.MustParseAddr("2001:db8::2") // same /64 as v6a
	type step struct {
		name      string
		addr      netip.Addr
		allocated bool // the connection holds an allocation from the start
		countIP   bool
		want      Decision
		victim    string
	}
	for _, tc := range []struct {
		name  string
		lim   Limits
		steps []step
	}{
		{"no limits", Limits{}, []step{
			{"a", a1, false, true, Admitted, ""},
			{"b", a1, false, true, Admitted, ""},
		}},
		{"per IP", Limits{PerIP: 1}, []step{
			{"a", a1, false, true, Admitted, ""},
			{"b", a1, false, true, Refused, ""},
			{"c", a2, false, true, Admitted, ""},
			{"d", a1, false, false, Admitted, ""}, // DTLS: claims its share later
		}},
		{"per IPv6 /64", Limits{PerIP: 1}, []step{
			{"a", v6a, false, true, Admitted, ""},
			{"b", v6b, false, true, Refused, ""},
		}},
		{"max sheds the oldest without an allocation", Limits{Max: 2}, []step{
			{"a", a1, true, true, Admitted, ""},
			{"b", a1, false, true, Admitted, ""},
			{"c", a2, false, true, Admitted, "b"},
			{"d", a2, false, true, Admitted, "c"},
		}},
		{"max refuses when all hold allocations", Limits{Max: 1}, []step{
			{"a", a1, true, true, Admitted, ""},
			{"b", a2, false, true, Refused, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(func(c *conn) bool { return c.allocated })
			for _, st := range tc.steps {
				e := NewEntry(&conn{name: st.name, allocated: st.allocated}, st.addr)
				d, v := s.Admit(e, tc.lim, st.countIP)
				got := ""
				if v != nil {
					got = v.Conn.name
				}
				if d != st.want || got != st.victim {
					t.Fatalf("%s: Admit = %v, victim %q; want %v, %q", st.name, d, got, st.want, st.victim)
				}
			}
		})
	}
}

func TestClaimIPAndRemove(t *testing.T) {
	s := New(func(*conn) bool { return false })
	lim := Limits{PerIP: 1}
	a := netip.MustParseAddr("192.0.2.1")
	e1, e2 := NewEntry(&conn{}, a), NewEntry(&conn{}, a)
	for _, e := range []*Entry[*conn]{e1, e2} {
		if d, _ := s.Admit(e, lim, false); d != Admitted {
			t.Fatalf("Admit = %v", d)
		}
	}
	if !s.ClaimIP(e1, lim) || s.ClaimIP(e2, lim) {
		t.Fatal("the second claim of one address's single share succeeded, or the first failed")
	}
	s.Remove(e1)
	if !s.ClaimIP(e2, lim) {
		t.Fatal("the share was not given back by Remove")
	}
	if c := s.Counts(); c.Accepted != 2 || c.RefusedPerIP != 1 {
		t.Fatalf("counts %+v", c)
	}
	s.Close()
	if d, _ := s.Admit(NewEntry(&conn{}, a), lim, false); d != Closing {
		t.Fatalf("Admit after Close = %v, want Closing", d)
	}
}

// TestAdmitAsksWithoutLock: the question whether a victim holds an
// allocation is asked with the Set's lock released, so it may call back
// into the Set (a reader reporting an allocation at that moment) without
// deadlocking.
func TestAdmitAsksWithoutLock(t *testing.T) {
	var s *Set[*conn]
	var first *Entry[*conn]
	s = New(func(c *conn) bool {
		s.SetAllocated(first, c.allocated) // takes s.mu
		return c.allocated
	})
	lim := Limits{Max: 1}
	first = NewEntry(&conn{name: "a", allocated: true}, netip.MustParseAddr("192.0.2.1"))
	if d, _ := s.Admit(first, lim, true); d != Admitted {
		t.Fatalf("Admit = %v", d)
	}
	if d, _ := s.Admit(NewEntry(&conn{name: "b"}, netip.MustParseAddr("192.0.2.2")), lim, true); d != Refused {
		t.Fatalf("Admit at the cap with every connection allocated = %v, want Refused", d)
	}
}
