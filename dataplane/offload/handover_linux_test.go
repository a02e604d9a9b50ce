package offload

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
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
			// The interfaces run the new program now.
			info, err := next.objs.TernTc.Info()
			if err != nil {
				t.Fatal(err)
			}
			newID, _ := info.ID()
			for _, ifn := range []string{tp.cvethT, tp.pvethT} {
				if got := attachedProgramIDs(t, tp.tern, ifn, attach); len(got) != 1 || got[0] != uint32(newID) {
					t.Errorf("%s runs programs %v after Upgrade, want [%d]", ifn, got, newID)
				}
			}
			relayRounds(t, v4, client, peer, 2)
			if err := next.Delete(v4.path(time.Time{})); err != nil {
				t.Fatal(err)
			}
			if err := next.Put(v4.path(time.Now().Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			// Prune deletes both halves of a path not kept.
			stale := v4.path(time.Now().Add(time.Hour))
			stale.Client = netip.AddrPortFrom(stale.Client.Addr(), stale.Client.Port()+1)
			stale.Peer = netip.AddrPortFrom(stale.Peer.Addr(), stale.Peer.Port()+1)
			if err := next.Put(stale); err != nil {
				t.Fatal(err)
			}
			if n, err := next.Prune([]Path{v4.path(time.Now().Add(time.Hour))}); n != 2 || err != nil {
				t.Errorf("Prune: %d entries, %v; want the stale path's 2", n, err)
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

// attachedProgramIDs returns the IDs of the programs on ifname's ingress
// in ns: tcx's, or the clsact bpf filters'.
func attachedProgramIDs(t *testing.T, ns, ifname string, attach Attach) []uint32 {
	t.Helper()
	var ids []uint32
	err := inNetns(t, ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		if attach == AttachTCX {
			r, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				return err
			}
			for _, p := range r.Programs {
				ids = append(ids, uint32(p.ID))
			}
			return nil
		}
		lnk, err := netlink.LinkByIndex(ifc.Index)
		if err != nil {
			return err
		}
		fs, err := netlink.FilterList(lnk, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok {
				ids = append(ids, uint32(bf.Id))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("programs on %s: %v", ifname, err)
	}
	return ids
}
