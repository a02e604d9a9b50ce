package tcattach

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/netnstest"
)

func TestTCXRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("attach: %w", ebpf.ErrNotSupported), true},
		{fmt.Errorf("attach: %w", unix.EINVAL), true},
		{fmt.Errorf("attach: %w", unix.EPERM), false},
		{errors.New("other"), false},
	} {
		if got := TCXRefused(c.err); got != c.want {
			t.Errorf("TCXRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// passProgram loads a SchedCLS program that passes every packet
// (TC_ACT_OK), closed when the test ends.
func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load a pass program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// ingress is what netlink says of lo's tc ingress in the current
// namespace: whether it has a clsact qdisc, and its filters.
func ingress(h *netlink.Handle) (clsact bool, filters []string, err error) {
	lnk, err := h.LinkByName("lo")
	if err != nil {
		return false, nil, err
	}
	qs, err := h.QdiscList(lnk)
	if err != nil {
		return false, nil, err
	}
	for _, q := range qs {
		clsact = clsact || q.Type() == "clsact"
	}
	if !clsact {
		return false, nil, nil
	}
	fs, err := h.FilterList(lnk, netlink.HANDLE_MIN_INGRESS)
	for _, f := range fs {
		name := f.Type()
		if bf, ok := f.(*netlink.BpfFilter); ok {
			name = bf.Name
		}
		filters = append(filters, fmt.Sprintf("%s prio %#x handle %d", strings.SplitN(name, ":", 2)[0], f.Attrs().Priority, f.Attrs().Handle))
	}
	return clsact, filters, err
}

// TestClsact, in a namespace of its own, on its lo: Clsact adds the qdisc
// and Tern's filter; a second Clsact (a ternd after one that crashed)
// replaces the filter rather than adding one; Close removes filter and
// qdisc, and leaves a qdisc that was there before; a filter of another
// tool at Tern's priority and handle is refused and left alone.
func TestClsact(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, netnstest.Uniq()+"a")
	prog := passProgram(t)
	want := fmt.Sprintf("%s prio %#x handle %d", Name, Priority, netlink.MakeHandle(0, Handle))
	err := netnstest.In(t, ns, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		check := func(when string, wantClsact bool, wantFilters ...string) error {
			clsact, filters, err := ingress(h)
			if err != nil {
				return fmt.Errorf("%s: %w", when, err)
			}
			if clsact != wantClsact || strings.Join(filters, ",") != strings.Join(wantFilters, ",") {
				return fmt.Errorf("%s: clsact %v filters %q, want clsact %v filters %q", when, clsact, filters, wantClsact, wantFilters)
			}
			return nil
		}
		first, err := Clsact(h, prog, lo)
		if err != nil {
			return fmt.Errorf("first Clsact: %w", err)
		}
		if err := check("attached", true, want); err != nil {
			return err
		}
		// The first is forgotten without Close, as a crash would.
		second, err := Clsact(h, prog, lo)
		if err != nil {
			return fmt.Errorf("second Clsact: %w", err)
		}
		if err := check("attached again", true, want); err != nil {
			return err
		}
		if err := second.Close(); err != nil {
			return fmt.Errorf("Close: %w", err)
		}
		// The second found the first's qdisc, so it leaves it.
		if err := check("closed", true); err != nil {
			return err
		}
		if err := first.Close(); err != nil {
			return fmt.Errorf("Close of the first: %w", err)
		}
		if err := check("both closed", false); err != nil {
			return err
		}

		// Another tool's filter at Tern's priority and handle.
		if err := h.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: lo.Index,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}); err != nil {
			return err
		}
		other := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: lo.Index, Parent: netlink.HANDLE_MIN_INGRESS,
			Handle: netlink.MakeHandle(0, Handle), Protocol: unix.ETH_P_ALL, Priority: Priority},
			Fd: prog.FD(), Name: "other_tool", DirectAction: true}
		if err := h.FilterAdd(other); err != nil {
			return fmt.Errorf("add another tool's filter: %w", err)
		}
		if d, err := Clsact(h, prog, lo); err == nil || !strings.Contains(err.Error(), "another tool's") {
			if d != nil {
				d.Close()
			}
			return fmt.Errorf("Clsact over another tool's filter: %v, want an error saying so", err)
		}
		return check("refused", true, fmt.Sprintf("other_tool prio %#x handle %d", Priority, netlink.MakeHandle(0, Handle)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTCX attaches and detaches by tcx where the kernel has it (Linux
// 6.6 on); elsewhere the refusal must be one TCXRefused recognizes.
func TestTCX(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, netnstest.Uniq()+"x")
	prog := passProgram(t)
	err := netnstest.In(t, ns, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		d, err := TCX(prog, lo)
		if err != nil {
			if TCXRefused(err) {
				t.Logf("no tcx here: %v", err)
				return nil
			}
			return err
		}
		return d.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
