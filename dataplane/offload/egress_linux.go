package offload

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Flags of the programs' ifaces map (bpf/offload.c).
const (
	ifaceSameInterface = 1
	ifaceLoopback      = 2
)

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
