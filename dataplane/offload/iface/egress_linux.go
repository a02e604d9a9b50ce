package iface

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EgressFor decides how packets relayed from ifc leave, given the IP
// families in use (v4, v6), asking the kernel through h (a netlink handle
// of ifc's namespace) and the forwarding sysctls under /proc/sys/net. Forwarding on for every family in use: FIB.
// Otherwise, on lo (every destination is local) or where every route of
// the main table leaves by ifc (a pod's eth0, a node's single NIC):
// SameInterface, which needs no forwarding. Otherwise FIB if
// forwarding is on for one of the families; usable is false when it is
// on for none (bpf_fib_lookup would refuse every packet: Auto leaves such
// an interface alone). why is a short code for metrics (forwarding_on,
// loopback, single_interface, forwarding_partial, forwarding_off) and
// reason says the same in words.
func EgressFor(h *netlink.Handle, ifc *net.Interface, v4, v6 bool) (e Egress, why, reason string, usable bool) {
	fwd4 := v4 && sysctlOn("/proc/sys/net/ipv4/conf/"+ifc.Name+"/forwarding")
	fwd6 := v6 && sysctlOn("/proc/sys/net/ipv6/conf/"+ifc.Name+"/forwarding")
	if fwd4 == v4 && fwd6 == v6 {
		return FIB, "forwarding_on", "forwarding on", true
	}
	if ifc.Flags&net.FlagLoopback != 0 {
		return SameInterface, "loopback", "loopback, forwarding off: every destination is local", true
	}
	only, why := onlyRoutedInterface(h, ifc, v4, v6)
	switch {
	case only:
		return SameInterface, "single_interface", "forwarding off; " + why, true
	case fwd4 || fwd6:
		return FIB, "forwarding_partial", "forwarding on for one family only; " + why, true
	}
	return FIB, "forwarding_off", "forwarding off and " + why, false
}

// onlyRoutedInterface reports whether every route of the main table, in
// the families in use, leaves by ifc (or by a loopback interface), and
// says why not.
func onlyRoutedInterface(h *netlink.Handle, ifc *net.Interface, v4, v6 bool) (bool, string) {
	var fams []int
	if v4 {
		fams = append(fams, unix.AF_INET)
	}
	if v6 {
		fams = append(fams, unix.AF_INET6)
	}
	for _, fam := range fams {
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return false, fmt.Sprintf("the routes could not be listed (%v)", err)
		}
		for _, r := range routes {
			links := []int{r.LinkIndex}
			for _, nh := range r.MultiPath {
				links = append(links, nh.LinkIndex)
			}
			for _, l := range links {
				if l == 0 || l == ifc.Index {
					continue
				}
				if other, err := net.InterfaceByIndex(l); err == nil && other.Flags&net.FlagLoopback != 0 {
					continue
				}
				dst := "default"
				if r.Dst != nil {
					dst = r.Dst.String()
				}
				return false, fmt.Sprintf("route %s leaves by interface %d, not %s", dst, l, ifc.Name)
			}
		}
	}
	return true, "every route leaves by " + ifc.Name
}

// sysctlOn reports whether the file at path reads as a non-zero number;
// false when it cannot be read.
func sysctlOn(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	v := strings.TrimSpace(string(b))
	return v != "" && v != "0"
}
