package iface

import (
	"fmt"
	"net"
	"net/netip"
)

// Carrying returns the names of the interfaces of the calling thread's
// network namespace that carry one of the addresses in want (IPv4-mapped
// IPv6 addresses count as IPv4), in the kernel's order; an unspecified
// address in want matches every interface with an address of its family
// other than a link-local one. The error is the kernel's refusal to list
// interfaces.
func Carrying(want []netip.Addr) ([]string, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var names []string
	for _, ifc := range ifcs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		if carries(addrs, want) {
			names = append(names, ifc.Name)
		}
	}
	return names, nil
}

// carries reports whether addrs (an interface's) include one of want.
func carries(addrs []net.Addr, want []netip.Addr) bool {
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
		for _, w := range want {
			w = w.Unmap()
			if w == ip || (w.IsUnspecified() && w.Is4() == ip.Is4() && !ip.IsLinkLocalUnicast()) {
				return true
			}
		}
	}
	return false
}
