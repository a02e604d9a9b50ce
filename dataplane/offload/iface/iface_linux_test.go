package iface

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/netnstest"
)

// TestEgressFor, in a namespace of its own with forwarding off: lo and an
// interface every route leaves by relay back out the same interface; a
// second routed interface leaves only the FIB, which needs forwarding
// (unusable while it is off); forwarding on makes the FIB usable. Plans
// gives Auto the same answers and leaves lo and the unusable out.
func TestEgressFor(t *testing.T) {
	netnstest.RequireRoot(t)
	u := netnstest.Uniq()
	ns := netnstest.New(t, u+"e")
	a0, a1, b0, b1 := u+"a0", u+"a1", u+"b0", u+"b1"
	netnstest.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=0")
	netnstest.Run(t, "ip", "-n", ns, "link", "add", a0, "type", "veth", "peer", "name", a1)
	netnstest.Run(t, "ip", "-n", ns, "addr", "add", "10.9.1.1/24", "dev", a0)
	netnstest.Run(t, "ip", "-n", ns, "link", "set", a0, "up")
	netnstest.Run(t, "ip", "-n", ns, "link", "set", a1, "up")
	netnstest.Run(t, "ip", "-n", ns, "route", "add", "default", "via", "10.9.1.2")

	type answer struct {
		egress Egress
		why    string
		usable bool
	}
	ask := func(name string) answer {
		t.Helper()
		var a answer
		err := netnstest.In(t, ns, func() error {
			h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
			if err != nil {
				return err
			}
			defer h.Close()
			ifc, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			a.egress, a.why, _, a.usable = EgressFor(h, ifc, true, false)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	plans := func() (got []string, skipped []string) {
		t.Helper()
		err := netnstest.In(t, ns, func() error {
			h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
			if err != nil {
				return err
			}
			defer h.Close()
			ps, sk, err := Plans(h, []string{"lo", a0, b0}, true, true, false)
			for _, p := range ps {
				got = append(got, fmt.Sprintf("%s %s %s", p.Interface.Name, p.Egress, p.Why))
			}
			skipped = sk
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, skipped
	}

	if got, want := ask("lo"), (answer{SameInterface, "loopback", true}); got != want {
		t.Errorf("lo, forwarding off: %+v, want %+v", got, want)
	}
	if got, want := ask(a0), (answer{SameInterface, "single_interface", true}); got != want {
		t.Errorf("the only routed interface, forwarding off: %+v, want %+v", got, want)
	}

	netnstest.Run(t, "ip", "-n", ns, "link", "add", b0, "type", "veth", "peer", "name", b1)
	netnstest.Run(t, "ip", "-n", ns, "addr", "add", "10.9.2.1/24", "dev", b0)
	netnstest.Run(t, "ip", "-n", ns, "link", "set", b0, "up")
	netnstest.Run(t, "ip", "-n", ns, "link", "set", b1, "up")
	if got, want := ask(a0), (answer{FIB, "forwarding_off", false}); got != want {
		t.Errorf("two routed interfaces, forwarding off: %+v, want %+v", got, want)
	}
	got, skipped := plans()
	if len(got) != 0 || len(skipped) != 3 || !strings.HasPrefix(skipped[0], "lo (loopback") {
		t.Errorf("Auto's plans, forwarding off: %q, skipped %q; want none, all three skipped", got, skipped)
	}

	netnstest.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf."+a0+".forwarding=1", "net.ipv4.conf."+b0+".forwarding=1")
	if got, want := ask(a0), (answer{FIB, "forwarding_on", true}); got != want {
		t.Errorf("forwarding on: %+v, want %+v", got, want)
	}
	got, _ = plans()
	if want := []string{a0 + " fib forwarding_on", b0 + " fib forwarding_on"}; !slices.Equal(got, want) {
		t.Errorf("Auto's plans, forwarding on: %q, want %q", got, want)
	}

	// Carrying and XDPCandidate, in the same namespace.
	err := netnstest.In(t, ns, func() error {
		names, err := Carrying([]netip.Addr{netip.MustParseAddr("10.9.2.1")})
		if err != nil || !slices.Equal(names, []string{b0}) {
			return fmt.Errorf("Carrying(10.9.2.1) = %q, %v; want [%s]", names, err, b0)
		}
		names, err = Carrying([]netip.Addr{netip.MustParseAddr("0.0.0.0")})
		if err != nil || !slices.Equal(names, []string{"lo", a0, b0}) {
			return fmt.Errorf("Carrying(0.0.0.0) = %q, %v; want lo, %s, %s", names, err, a0, b0)
		}
		for _, name := range []string{"lo", a0} {
			ifc, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			if XDPCandidate(ifc) {
				return fmt.Errorf("XDPCandidate(%s) = true, want false (lo and veth take tc)", name)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
