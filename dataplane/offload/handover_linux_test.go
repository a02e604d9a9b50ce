package offload

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// dupAll duplicates fds as SCM_RIGHTS does for the successor of a
// hand-over: descriptors of its own to the same kernel objects.
func dupAll(t *testing.T, fds []int) []int {
	t.Helper()
	out := make([]int, len(fds))
	for i, fd := range fds {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = d
	}
	return out
}

// adoptIn is Adopt inside namespace ns (its netlink handle is the
// namespace's).
func adoptIn(t *testing.T, ns string, h Handover, fds []int) (*Offload, error) {
	t.Helper()
	var o *Offload
	err := inNetns(t, ns, func() error {
		var err error
		o, err = Adopt(h, fds)
		return err
	})
	return o, err
}

func counted(o *Offload) Counters {
	var got Counters
	o.Counters(func(_ uint32, c Counters) {
		got.ClientToPeerPackets += c.ClientToPeerPackets
		got.PeerToClientPackets += c.PeerToClientPackets
	})
	return got
}

// TestHandoverAdopt hands an attached Offload over as ternd --takeover
// does (the descriptors of Handover, duplicated as SCM_RIGHTS would) by
// tcx and by clsact: the kernel relays through the switch with the same
// maps and counters; a successor whose maps would differ is refused and
// the predecessor relays on; the adopter then Puts and Deletes, upgrades
// the programs atomically (forced: this binary has only one object) and
// on Close detaches as its predecessor would have.
func TestHandoverAdopt(t *testing.T) {
	for _, attach := range []Attach{AttachTCX, AttachClsact} {
		t.Run(string(attach), func(t *testing.T) {
			tp := newTopo(t)
			listen(t, tp.tern, listenerAddr)
			listen(t, tp.tern, relayAddr)
			client := listen(t, tp.client, clientAddr)
			peer := listen(t, tp.peer, peerAddr)
			old := openIn(t, tp.tern, Config{Mode: TC, Attach: attach, Interfaces: []string{tp.cvethT, tp.pvethT}})
			if err := old.Put(v4.path(time.Now().Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			relayRounds(t, v4, client, peer, 3)

			h, fds, err := old.Handover()
			if err != nil {
				t.Fatal(err)
			}
			if len(fds) != h.FDs() {
				t.Fatalf("Handover: %d descriptors, FDs() says %d", len(fds), h.FDs())
			}
			for _, hi := range h.Interfaces {
				if hi.Link != (attach == AttachTCX) || hi.OwnsQdisc != (attach == AttachClsact) {
					t.Errorf("%s: %+v", hi.Name, hi)
				}
			}

			// A successor whose programs want other maps is refused, and
			// closes what it was given without detaching anything.
			specHook = func(s *ebpf.CollectionSpec) { s.Maps["c2p"].MaxEntries++ }
			_, err = adoptIn(t, tp.tern, h, dupAll(t, fds))
			specHook = nil
			if !errors.Is(err, ErrIncompatible) {
				t.Fatalf("Adopt with other map specs: %v, want ErrIncompatible", err)
			}
			t.Logf("refused: %v", err)
			relayRounds(t, v4, client, peer, 3)

			forceUpgrade = true
			next, err := adoptIn(t, tp.tern, h, dupAll(t, fds))
			forceUpgrade = false
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Release(); err != nil {
				t.Fatalf("Release: %v", err)
			}
			// The predecessor gone, the kernel relays on its maps.
			relayRounds(t, v4, client, peer, 3)
			if got := counted(next); got.ClientToPeerPackets != 9 || got.PeerToClientPackets != 9 {
				t.Errorf("adopted counters %+v, want 9 packets each way (3 before, 3 during, 3 after the switch)", got)
			}
			if m := next.InterfaceModes()[tp.cvethT]; m.Attach != map[Attach]string{AttachTCX: "tcx", AttachClsact: "clsact"}[attach] {
				t.Errorf("adopted mode %+v", m)
			}
			before := progTag(next.objs.TernTc)
			upgraded, err := next.Upgrade()
			if err != nil || !upgraded {
				t.Fatalf("Upgrade: %v, %v", upgraded, err)
			}
			t.Logf("program tag %s, upgraded to %s", before, progTag(next.objs.TernTc))
			relayRounds(t, v4, client, peer, 2)
			if err := next.Delete(v4.path(time.Time{})); err != nil {
				t.Fatal(err)
			}
			if err := next.Put(v4.path(time.Now().Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			relayRounds(t, v4, client, peer, 1)
			if got := counted(next); got.ClientToPeerPackets != 12 || got.PeerToClientPackets != 12 {
				t.Errorf("counters %+v, want 12 packets each way", got)
			}
			if err := next.Close(); err != nil {
				t.Fatal(err)
			}
			for _, ifn := range []string{tp.cvethT, tp.pvethT} {
				st := tcStateOf(t, tp.tern, ifn)
				if st.clsact || len(st.filters) != 0 {
					t.Errorf("%s after the adopter's Close: %+v, want no qdisc and no filter", ifn, st)
				}
				if attach == AttachTCX {
					if n := tcxProgramsOn(t, tp.tern, ifn); n != 0 {
						t.Errorf("%s after the adopter's Close: %d tcx programs", ifn, n)
					}
				}
			}
		})
	}
}

// tcxProgramsOn returns how many tcx ingress programs ifname has in ns.
func tcxProgramsOn(t *testing.T, ns, ifname string) int {
	t.Helper()
	var n int
	err := inNetns(t, ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		r, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		n = len(r.Programs)
		return nil
	})
	if err != nil {
		t.Fatalf("query tcx programs: %v", err)
	}
	return n
}
