package offload

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/tern-gw/tern/dataplane/offload/tcattach"
)

// tcState is what netlink says of an interface's tc ingress: whether it
// has a clsact qdisc, and the names of its bpf filters.
type tcState struct {
	clsact  bool
	filters []string
}

func tcStateOf(t testing.TB, ns, ifname string) tcState {
	t.Helper()
	var st tcState
	err := inNetns(t, ns, func() error {
		lnk, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		qs, err := netlink.QdiscList(lnk)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Type() == "clsact" {
				st.clsact = true
			}
		}
		if !st.clsact {
			return nil
		}
		fs, err := netlink.FilterList(lnk, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok {
				st.filters = append(st.filters, fmt.Sprintf("%s prio %#x da %v", bf.Name, bf.Priority, bf.DirectAction))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tc state of %s in %s: %v", ifname, ns, err)
	}
	return st
}

// addClsact adds a clsact qdisc to ifname in ns, as another tool would.
func addClsact(t testing.TB, ns, ifname string) {
	t.Helper()
	err := inNetns(t, ns, func() error {
		lnk, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		return netlink.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: lnk.Attrs().Index,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}})
	})
	if err != nil {
		t.Fatalf("add clsact to %s: %v", ifname, err)
	}
}

// relayRounds sends n datagrams each way along a's path and checks they
// arrive rewritten.
func relayRounds(t *testing.T, a addrSet, client, peer *net.UDPConn, n int) {
	t.Helper()
	for i := range n {
		payload := bytes.Repeat([]byte{byte(i), 0x3c}, 40)
		send(t, client, a.listener, channelData(0x4001, payload, 0))
		expect(t, "client->peer", peer, payload, a.relay)
		send(t, peer, a.relay, payload)
		expect(t, "peer->client", client, channelData(0x4001, payload, 0), a.listener)
	}
}

// TestClsactAttach forces the clsact attachment on the veth topology: the
// programs relay as with tcx, netlink shows Tern's direct-action filter
// (and the qdisc) while they run, and Close removes both; a clsact qdisc
// that was there before stays, without Tern's filter.
func TestClsactAttach(t *testing.T) {
	for _, pre := range []bool{false, true} {
		t.Run(map[bool]string{false: "new qdisc", true: "existing qdisc"}[pre], func(t *testing.T) {
			tp := newTopo(t)
			if pre {
				addClsact(t, tp.tern, tp.cvethT)
			}
			listen(t, tp.tern, listenerAddr)
			listen(t, tp.tern, relayAddr)
			client := listen(t, tp.client, clientAddr)
			peer := listen(t, tp.peer, peerAddr)
			o := openIn(t, tp.tern, Config{Mode: TC, Attach: AttachClsact, Interfaces: []string{tp.cvethT, tp.pvethT}})
			for _, ifn := range []string{tp.cvethT, tp.pvethT} {
				m := o.InterfaceModes()[ifn]
				if m.Hook != TC || m.Attach != "clsact" || m.Egress != EgressFIB {
					t.Errorf("%s: %+v, want TC clsact fib", ifn, m)
				}
				st := tcStateOf(t, tp.tern, ifn)
				if want := fmt.Sprintf("%s prio %#x da true", tcattach.Name, tcattach.Priority); !st.clsact || len(st.filters) != 1 || st.filters[0] != want {
					t.Errorf("%s while attached: %+v, want a clsact qdisc with [%s]", ifn, st, want)
				}
			}
			if err := o.Put(v4.path(time.Now().Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			relayRounds(t, v4, client, peer, 5)
			var got Counters
			o.Counters(func(_ uint32, c Counters) { got = c })
			if got.ClientToPeerPackets != 5 || got.PeerToClientPackets != 5 {
				t.Errorf("counters %+v, want 5 packets each way", got)
			}
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
			if st := tcStateOf(t, tp.tern, tp.cvethT); st.clsact != pre || len(st.filters) != 0 {
				t.Errorf("%s after Close: %+v, want clsact %v and no filter", tp.cvethT, st, pre)
			}
			if st := tcStateOf(t, tp.tern, tp.pvethT); st.clsact || len(st.filters) != 0 {
				t.Errorf("%s after Close: %+v, want no qdisc", tp.pvethT, st)
			}
		})
	}
}

// TestClsactReplacesStale: a filter left by a ternd that died (a clsact
// filter outlives its process) is replaced by the next Open, not doubled.
func TestClsactReplacesStale(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t, uniq()+"s")
	first := openIn(t, ns, Config{Mode: TC, Attach: AttachClsact, Interfaces: []string{"lo"}})
	// Forget the first without removing its filter, as a crash would.
	first.links = nil
	second := openIn(t, ns, Config{Mode: TC, Attach: AttachClsact, Interfaces: []string{"lo"}})
	if st := tcStateOf(t, ns, "lo"); len(st.filters) != 1 {
		t.Errorf("after a second Open: %+v, want one filter", st)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if st := tcStateOf(t, ns, "lo"); len(st.filters) != 0 {
		t.Errorf("after Close: %+v, want no filter", st)
	}
}

// TestAutoFallsBackToClsact: where the kernel refuses tcx (here
// AttachTCX answers as cilium/ebpf does on a kernel before 6.6), Auto
// attaches through clsact, says why, and relays; TCX asked for by name
// fails with ErrUnsupported instead.
func TestAutoFallsBackToClsact(t *testing.T) {
	tp := newTopo(t)
	orig := attachTCX
	attachTCX = func(*ebpf.Program, *net.Interface) (tcattach.Detacher, error) {
		return nil, fmt.Errorf("attach tcx link: %w", ebpf.ErrNotSupported)
	}
	t.Cleanup(func() { attachTCX = orig })
	err := inNetns(t, tp.tern, func() error {
		o, err := Open(Config{Mode: TC, Attach: AttachTCX, Interfaces: []string{tp.cvethT}})
		if err == nil {
			o.Close()
		}
		return err
	})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("TCX where tcx is refused: %v, want ErrUnsupported", err)
	}
	listen(t, tp.tern, listenerAddr)
	listen(t, tp.tern, relayAddr)
	client := listen(t, tp.client, clientAddr)
	peer := listen(t, tp.peer, peerAddr)
	o := openIn(t, tp.tern, Config{Mode: Auto, Interfaces: []string{tp.cvethT, tp.pvethT}})
	for _, ifn := range []string{tp.cvethT, tp.pvethT} {
		m := o.InterfaceModes()[ifn]
		if m.Attach != "clsact" || !strings.Contains(m.Reason, "tcx refused") {
			t.Errorf("%s: %+v, want clsact because tcx was refused", ifn, m)
		}
		if st := tcStateOf(t, tp.tern, ifn); !st.clsact || len(st.filters) != 1 {
			t.Errorf("%s: %+v, want a clsact qdisc with Tern's filter", ifn, st)
		}
	}
	if err := o.Put(v4.path(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	relayRounds(t, v4, client, peer, 3)
}

// TestValidateAttach: Open refuses an attach method it does not know.
func TestValidateAttach(t *testing.T) {
	if err := (Config{Mode: TC, Attach: "bogus"}).Validate(); err == nil {
		t.Error("Validate accepted attach bogus")
	}
}
