package offload

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/offload/kernel"
	"github.com/tern-gw/tern/dataplane/offload/tcattach"
)

// maps and programs name o's kernel objects as the programs' object file
// does, in the order of a Handover.
func (o *ternObjects) maps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"c2p": o.C2p, "counters": o.Counters, "ifaces": o.Ifaces, "locals": o.Locals,
		"p2c": o.P2c, "scratch": o.Scratch, "stats": o.Stats}
}

var (
	handoverMaps     = []string{"c2p", "counters", "ifaces", "locals", "p2c", "scratch", "stats"}
	handoverPrograms = []string{"tern_tc", "tern_xdp", "tern_xdp_pass"}
)

func (p *ternPrograms) byName() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"tern_tc": p.TernTc, "tern_xdp": p.TernXdp, "tern_xdp_pass": p.TernXdpPass}
}

// Handover describes o for a successor and returns the descriptors to
// send with it, in its order. They stay o's: they are valid until Release
// or Close, and sending them (SCM_RIGHTS) gives the successor descriptors
// of its own to the same maps, programs and links.
func (o *Offload) Handover() (Handover, []int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var h Handover
	var fds []int
	ms := o.objs.maps()
	for _, name := range handoverMaps {
		h.Maps = append(h.Maps, name)
		fds = append(fds, ms[name].FD())
	}
	ps := o.objs.ternPrograms.byName()
	for _, name := range handoverPrograms {
		h.Programs = append(h.Programs, name)
		fds = append(fds, ps[name].FD())
	}
	for i, name := range o.ifaces {
		hi := HandoverInterface{Name: name, Index: o.index[name], Mode: o.modes[name]}
		if l, ok := o.links[i].(interface{ FD() int }); ok {
			hi.Link = true
			fds = append(fds, l.FD())
		} else {
			hi.OwnsQdisc = tcattach.OwnsQdisc(o.links[i])
		}
		h.Interfaces = append(h.Interfaces, hi)
	}
	return h, fds, nil
}

// Release gives o up to the successor it was handed over to: it closes
// this process's descriptors without detaching anything or removing a
// clsact filter, so that the kernel relays on with the successor's. o
// does nothing afterwards (Close is a no-op).
func (o *Offload) Release() error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for _, l := range o.links {
		errs = append(errs, tcattach.Release(l))
	}
	o.links = nil
	if o.nl != nil {
		o.nl.Close()
		o.nl = nil
	}
	errs = append(errs, o.objs.Close(), closeUpgrade(o.upgrade))
	o.objs, o.upgrade = ternObjects{}, nil
	return errors.Join(errs...)
}

// Adopt makes an Offload of the kernel objects a predecessor handed over
// (h, and fds in its order, which Adopt owns from then on: it closes them
// on an error). It changes nothing in the kernel: the programs relay on
// with the entries they have. It checks that every map is what this
// binary's programs were built for (type, key and value sizes, entries,
// flags), else it returns an error wrapping ErrIncompatible; and it loads
// this binary's programs against the adopted maps: where they differ
// from the running ones (another object), Upgrade puts them in place
// once the hand-over is confirmed.
func Adopt(h Handover, fds []int) (*Offload, error) {
	if len(fds) != h.FDs() {
		closeFDs(fds)
		return nil, fmt.Errorf("offload: hand-over names %d descriptors, %d came", h.FDs(), len(fds))
	}
	o := &Offload{modes: map[string]InterfaceMode{}, index: map[string]int{}}
	fail := func(err error) (*Offload, error) {
		o.closeAdopted()
		return nil, err
	}
	next := 0
	take := func() int { fd := fds[next]; fds[next] = -1; next++; return fd }
	defer func() { closeFDs(fds[next:]) }()
	got := map[string]*ebpf.Map{}
	for _, name := range h.Maps {
		m, err := ebpf.NewMapFromFD(take())
		if err != nil {
			return fail(fmt.Errorf("offload: adopting map %s: %w", name, err))
		}
		got[name] = m
	}
	o.objs.C2p, o.objs.Counters, o.objs.Ifaces, o.objs.Locals = got["c2p"], got["counters"], got["ifaces"], got["locals"]
	o.objs.P2c, o.objs.Scratch, o.objs.Stats = got["p2c"], got["scratch"], got["stats"]
	progs := map[string]*ebpf.Program{}
	for _, name := range h.Programs {
		p, err := ebpf.NewProgramFromFD(take())
		if err != nil {
			return fail(fmt.Errorf("offload: adopting program %s: %w", name, err))
		}
		progs[name] = p
	}
	o.objs.TernTc, o.objs.TernXdp, o.objs.TernXdpPass = progs["tern_tc"], progs["tern_xdp"], progs["tern_xdp_pass"]
	for _, name := range handoverMaps {
		if got[name] == nil {
			return fail(fmt.Errorf("offload: the hand-over lacks map %s", name))
		}
	}
	for _, name := range handoverPrograms {
		if progs[name] == nil {
			return fail(fmt.Errorf("offload: the hand-over lacks program %s", name))
		}
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fail(fmt.Errorf("offload: netlink: %w", err))
	}
	o.nl = nl
	for _, hi := range h.Interfaces {
		ifc := &net.Interface{Index: hi.Index, Name: hi.Name}
		if hi.Link {
			l, err := link.NewFromFD(take())
			if err != nil {
				return fail(fmt.Errorf("offload: adopting the link of %s: %w", hi.Name, err))
			}
			o.links = append(o.links, l)
		} else {
			o.links = append(o.links, tcattach.AdoptClsact(nl, ifc, hi.OwnsQdisc))
		}
		o.ifaces = append(o.ifaces, hi.Name)
		o.modes[hi.Name] = hi.Mode
		o.index[hi.Name] = hi.Index
	}
	o.attached = XDP
	for _, m := range o.modes {
		if m.Hook != XDP {
			o.attached = TC
		}
	}
	if err := o.prepareUpgrade(); err != nil {
		return fail(err)
	}
	return o, nil
}

// closeAdopted closes the descriptors an Adopt that failed took, without
// detaching: the predecessor serves on with its own.
func (o *Offload) closeAdopted() {
	for _, l := range o.links {
		_ = tcattach.Release(l)
	}
	if o.nl != nil {
		o.nl.Close()
	}
	_ = o.objs.Close()
	_ = closeUpgrade(o.upgrade)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

// specHook lets a test change this binary's map specs before Adopt
// compares them with the adopted maps.
var specHook func(*ebpf.CollectionSpec)

// prepareUpgrade checks the adopted maps against this binary's specs and
// loads this binary's programs against them; where the programs differ
// from the running ones (their tags), it keeps them in o.upgrade for
// Upgrade.
func (o *Offload) prepareUpgrade() error {
	spec, err := loadTern()
	if err != nil {
		return err
	}
	if specHook != nil {
		specHook(spec)
	}
	repl := map[string]*ebpf.Map{}
	for name, m := range o.objs.maps() {
		ms := spec.Maps[name]
		if ms == nil {
			return fmt.Errorf("%w: this binary's programs have no map %s", ErrIncompatible, name)
		}
		if m.Type() != ms.Type || m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize ||
			m.MaxEntries() != ms.MaxEntries || m.Flags() != ms.Flags {
			return fmt.Errorf("%w: map %s runs as %v key %d value %d entries %d flags %#x, this binary's programs want %v key %d value %d entries %d flags %#x;"+
				" the old process serves on: hand over between releases whose offload maps match, or restart", ErrIncompatible, name,
				m.Type(), m.KeySize(), m.ValueSize(), m.MaxEntries(), m.Flags(), ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries, ms.Flags)
		}
		repl[name] = m
	}
	if kernel.AtLeast(6, 16) {
		const bpfFIPv6 = 1 << 7
		if err := spec.Variables["l4_csum_ipv6_flag"].Set(uint64(bpfFIPv6)); err != nil {
			return err
		}
	}
	var np ternPrograms
	if err := spec.LoadAndAssign(&np, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return unsupported("load this binary's programs against the handed-over maps", err)
	}
	same := true
	old, nw := o.objs.ternPrograms.byName(), np.byName()
	for _, name := range handoverPrograms {
		if forceUpgrade || progTag(old[name]) != progTag(nw[name]) || progTag(nw[name]) == "" {
			same = false
		}
	}
	if same {
		return np.Close()
	}
	o.upgrade = &np
	return nil
}

// forceUpgrade makes prepareUpgrade take this binary's programs even
// where their tags are the running ones' (a test of Upgrade).
var forceUpgrade bool

func progTag(p *ebpf.Program) string {
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Tag
}

// Upgrade replaces the running programs with this binary's where Adopt
// found them different: each bpf_link's program (BPF_LINK_UPDATE) and
// each clsact filter's (a netlink replace), atomically per interface, on
// the same maps. It reports whether it replaced any. On an error the
// interfaces not yet updated keep the old programs, which relay with the
// same maps.
func (o *Offload) Upgrade() (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.upgrade == nil {
		return false, nil
	}
	type updater interface{ Update(*ebpf.Program) error }
	for i, l := range o.links {
		u, ok := l.(updater)
		if !ok {
			return false, fmt.Errorf("offload: the attachment of %s cannot be updated", o.ifaces[i])
		}
		p := o.upgrade.TernTc
		if o.modes[o.ifaces[i]].Hook == XDP {
			p = o.upgrade.TernXdp
		}
		if err := u.Update(p); err != nil {
			return false, fmt.Errorf("offload: updating the program on %s: %w", o.ifaces[i], err)
		}
	}
	old := o.objs.ternPrograms
	o.objs.ternPrograms = *o.upgrade
	o.upgrade = nil
	return true, old.Close()
}

// closeUpgrade closes the programs Upgrade would have put in place.
func closeUpgrade(p *ternPrograms) error {
	if p == nil {
		return nil
	}
	return p.Close()
}

// Prune deletes every entry of the maps that is not one of keep's (both
// directions): what a predecessor installed for paths this process does
// not relay (a permission or channel its config no longer allows). It
// returns how many entries it deleted.
func (o *Offload) Prune(keep []Path) (int, error) {
	cks := map[ternC2pKey]bool{}
	pks := map[ternP2cKey]bool{}
	for _, p := range keep {
		p.Expires, p.Counter = time.Unix(1, 0), 0
		ck, _, pk, _, err := p.entries(0)
		if err != nil {
			continue
		}
		cks[ck], pks[pk] = true, true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var staleC []ternC2pKey
	var staleP []ternP2cKey
	var (
		ck ternC2pKey
		cv ternC2pVal
		pk ternP2cKey
		pv ternP2cVal
	)
	it := o.objs.C2p.Iterate()
	for it.Next(&ck, &cv) {
		if !cks[ck] {
			staleC = append(staleC, ck)
		}
	}
	errs := []error{it.Err()}
	itp := o.objs.P2c.Iterate()
	for itp.Next(&pk, &pv) {
		if !pks[pk] {
			staleP = append(staleP, pk)
		}
	}
	errs = append(errs, itp.Err())
	for i := range staleC {
		if err := o.objs.C2p.Delete(&staleC[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	for i := range staleP {
		if err := o.objs.P2c.Delete(&staleP[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return len(staleC) + len(staleP), errors.Join(errs...)
}
