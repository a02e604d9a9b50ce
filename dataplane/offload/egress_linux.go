package offload

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Flags of the programs' ifaces map (bpf/offload.c).
const (
	ifaceSameInterface = 1
	ifaceLoopback      = 2
)

// egressFor decides how packets relayed from ifc leave, given the IP
// families in use. Forwarding on for every family in use: EgressFIB.
// Otherwise, on lo (every destination is local) or where every route of
// the main table leaves by ifc (a pod's eth0, a node's single NIC):
// EgressSameInterface, which needs no forwarding. Otherwise EgressFIB if
// forwarding is on for one of the families; usable is false when it is
// on for none (bpf_fib_lookup would refuse every packet: Auto leaves such
// an interface alone).
func egressFor(h *netlink.Handle, ifc *net.Interface, v4, v6 bool) (e Egress, why, reason string, usable bool) {
	fwd4 := v4 && sysctlOn("/proc/sys/net/ipv4/conf/"+ifc.Name+"/forwarding")
	fwd6 := v6 && sysctlOn("/proc/sys/net/ipv6/conf/"+ifc.Name+"/forwarding")
	if fwd4 == v4 && fwd6 == v6 {
		return EgressFIB, "forwarding_on", "forwarding on", true
	}
	if ifc.Flags&net.FlagLoopback != 0 {
		return EgressSameInterface, "loopback", "loopback, forwarding off: every destination is local", true
	}
	only, why := onlyRoutedInterface(h, ifc, v4, v6)
	switch {
	case only:
		return EgressSameInterface, "single_interface", "forwarding off; " + why, true
	case fwd4 || fwd6:
		return EgressFIB, "forwarding_partial", "forwarding on for one family only; " + why, true
	}
	return EgressFIB, "forwarding_off", "forwarding off and " + why, false
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

// setIface tells the tc program how packets arriving on ifc leave.
func (o *Offload) setIface(ifc *net.Interface, e Egress) error {
	v := ternIface{Mtu: uint32(ifc.MTU)}
	if e == EgressSameInterface {
		v.Flags = ifaceSameInterface
		if ifc.Flags&net.FlagLoopback != 0 {
			v.Flags |= ifaceLoopback
		}
	}
	k := uint32(ifc.Index)
	return o.objs.Ifaces.Update(&k, &v, ebpf.UpdateAny)
}

// setLocals writes this network namespace's addresses into the locals
// map: a packet the same-interface mode rewrote towards one of them
// continues up the stack instead of going out.
func (o *Offload) setLocals() error {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("offload: list addresses: %w", err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		k := ternLocalKey{Addr: addr16(ip), Family: 4}
		if ip.Is6() {
			k.Family = 6
		}
		var one uint8 = 1
		if err := o.objs.Locals.Update(&k, &one, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("offload: local address %v: %w", ip, err)
		}
	}
	return nil
}
