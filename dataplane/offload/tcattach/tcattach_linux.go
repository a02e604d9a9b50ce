package tcattach

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The clsact attachment's filter: its own priority and handle on the
// interface's ingress hook, so that Tern's filter can be told from other
// tools' (Cilium, say) and a stale one of a crashed ternd replaced.
const (
	// Priority is the filter's priority on the ingress hook.
	Priority = 0x7e4e
	// Handle is the filter's handle (minor number).
	Handle = 1
	// Name is the filter's name; the kernel appends the program's tag,
	// so a filter is Tern's when its name starts with Name.
	Name = "tern_tc"
)

// TCX attaches prog to ifc's ingress by tcx (link.AttachTCX): a bpf_link
// this process owns. On a kernel before 6.6 it fails with an error
// TCXRefused recognizes.
func TCX(prog *ebpf.Program, ifc *net.Interface) (Detacher, error) {
	return link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: prog, Attach: ebpf.AttachTCXIngress})
}

// TCXRefused reports whether TCX failed because the kernel has no tcx
// (before Linux 6.6): cilium/ebpf's probe says ErrNotSupported, and a
// kernel that does not know the attach type answers EINVAL.
func TCXRefused(err error) bool {
	return errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL)
}

// clsactFilter is the program attached as a direct-action bpf filter on
// a clsact qdisc's ingress hook. Unlike a bpf_link it outlives the
// process: Close removes the filter, and the qdisc where Clsact created it.
type clsactFilter struct {
	nl         *netlink.Handle
	filter     *netlink.BpfFilter
	qdisc      *netlink.Clsact // nil where the qdisc was there before
	ifindex    int
	ifname     string
	removeOnce bool
}

// Clsact adds a clsact qdisc to ifc unless it has one, and prog as
// Tern's direct-action filter (Priority, Handle, Name) on its ingress
// hook, through h (a netlink handle of ifc's network namespace, which the
// returned Detacher's Close uses from any thread). It replaces a filter
// of a previous ternd that was killed before it could remove its own. A
// filter of another tool at Tern's priority and handle is an error, not
// replaced. Netlink's errors come back wrapped (errors.Is finds the errno).
func Clsact(h *netlink.Handle, prog *ebpf.Program, ifc *net.Interface) (Detacher, error) {
	c := &clsactFilter{nl: h, ifindex: ifc.Index, ifname: ifc.Name}
	q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifc.Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	switch err := h.QdiscAdd(q); {
	case err == nil:
		c.qdisc = q
	case errors.Is(err, unix.EEXIST):
		// Someone's clsact (maybe a crashed ternd's): share it, and leave
		// it when done.
	default:
		return nil, fmt.Errorf("add clsact qdisc: %w", err)
	}
	c.filter = &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifc.Index,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    netlink.MakeHandle(0, Handle),
			Protocol:  unix.ETH_P_ALL,
			Priority:  Priority,
		},
		Fd:           prog.FD(),
		Name:         Name,
		DirectAction: true,
	}
	if err := c.checkSlot(); err != nil {
		c.removeQdisc()
		return nil, err
	}
	if err := h.FilterReplace(c.filter); err != nil {
		c.removeQdisc()
		return nil, fmt.Errorf("add bpf filter: %w", err)
	}
	return c, nil
}

// checkSlot refuses to replace a filter at Tern's priority and handle
// that is not Tern's.
func (c *clsactFilter) checkSlot() error {
	lnk, err := c.nl.LinkByIndex(c.ifindex)
	if err != nil {
		return fmt.Errorf("link %d: %w", c.ifindex, err)
	}
	fs, err := c.nl.FilterList(lnk, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return fmt.Errorf("list ingress filters: %w", err)
	}
	for _, f := range fs {
		a := f.Attrs()
		if a.Priority != Priority || a.Handle != c.filter.Handle {
			continue
		}
		if bf, ok := f.(*netlink.BpfFilter); !ok || !strings.HasPrefix(bf.Name, Name) {
			return fmt.Errorf("ingress filter priority %#x handle %d is another tool's (%s), not Tern's", Priority, Handle, f.Type())
		}
	}
	return nil
}

func (c *clsactFilter) removeQdisc() error {
	if c.qdisc == nil {
		return nil
	}
	err := c.nl.QdiscDel(c.qdisc)
	c.qdisc = nil
	if err != nil && !gone(err) {
		return fmt.Errorf("tcattach: remove clsact qdisc of %s: %w", c.ifname, err)
	}
	return nil
}

// Close removes the filter, and the clsact qdisc when Clsact created
// it. An interface already gone is no error.
func (c *clsactFilter) Close() error {
	if c.removeOnce {
		return nil
	}
	c.removeOnce = true
	var errs []error
	if err := c.nl.FilterDel(c.filter); err != nil && !gone(err) {
		errs = append(errs, fmt.Errorf("tcattach: remove bpf filter of %s: %w", c.ifname, err))
	}
	errs = append(errs, c.removeQdisc())
	return errors.Join(errs...)
}

// gone reports a netlink error saying the interface, qdisc or filter no
// longer exists.
func gone(err error) bool {
	return errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL)
}

// AdoptClsact returns the Detacher of Tern's clsact filter on ifc, which
// a previous ternd added and handed over (its hand-over to a successor):
// Close removes it, and the qdisc when ownsQdisc (the previous ternd added
// it), as it would have. h is a netlink handle of ifc's network
// namespace.
func AdoptClsact(h *netlink.Handle, ifc *net.Interface, ownsQdisc bool) Detacher {
	c := &clsactFilter{nl: h, ifindex: ifc.Index, ifname: ifc.Name}
	c.filter = &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifc.Index,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    netlink.MakeHandle(0, Handle),
			Protocol:  unix.ETH_P_ALL,
			Priority:  Priority,
		},
		Name:         Name,
		DirectAction: true,
	}
	if ownsQdisc {
		c.qdisc = &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifc.Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	}
	return c
}

// OwnsQdisc reports whether d is a clsact filter whose qdisc Tern added
// (Close removes both).
func OwnsQdisc(d Detacher) bool {
	c, ok := d.(*clsactFilter)
	return ok && c.qdisc != nil
}

// Update replaces the filter's program with prog in one netlink request
// (the kernel swaps it atomically: every packet meets one program or the
// other).
func (c *clsactFilter) Update(prog *ebpf.Program) error {
	f := *c.filter
	f.Fd = prog.FD()
	if err := c.nl.FilterReplace(&f); err != nil {
		return fmt.Errorf("tcattach: replace bpf filter of %s: %w", c.ifname, err)
	}
	c.filter = &f
	return nil
}

// Release forgets the attachment without removing anything: a successor
// that was handed it over removes it.
func Release(d Detacher) error {
	if c, ok := d.(*clsactFilter); ok {
		c.removeOnce = true
		return nil
	}
	return d.Close() // a bpf_link's descriptor: the successor holds its own
}
