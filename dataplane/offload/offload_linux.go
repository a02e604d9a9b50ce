package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/offload/iface"
	"github.com/tern-gw/tern/dataplane/offload/kernel"
	"github.com/tern-gw/tern/dataplane/offload/tcattach"
)

// MaxPaths is the number of Paths the maps hold (each direction is one
// hash entry of its own map). Put fails once they are full.
const MaxPaths = 65536

// Offload is a loaded and attached set of offload programs and their maps.
// Its methods are safe for concurrent use.
type Offload struct {
	mu       sync.Mutex
	objs     ternObjects
	links    []tcattach.Detacher
	nl       *netlink.Handle // this network namespace's, for clsact and routes
	attached Mode
	ifaces   []string
	modes    map[string]InterfaceMode
	index    map[string]int // interface indexes by name
	// upgrade are this binary's programs, loaded against maps a
	// predecessor handed over, which Upgrade puts in place of the running
	// ones (Adopt); nil when they are the same.
	upgrade *ternPrograms
}

// Open loads the programs, creates the maps and attaches to cfg's
// interfaces. tcx (Linux 6.6) and XDP attach through bpf_links that this
// process owns: when it exits or crashes the kernel detaches the programs
// and frees the maps, so nothing stays behind and nothing is pinned.
// Where tcx is refused (cfg.Attach Auto) or not wanted (Clsact) the tc
// program goes in a direct-action bpf filter on a clsact qdisc, which
// Close removes (the qdisc too where Open added it) but a crash leaves
// until the next Open replaces it. Each interface gets an Egress
// (iface.EgressFor); Auto skips interfaces where neither egress works. Open
// returns an error wrapping ErrUnsupported where BPF is refused or the
// kernel lacks what the programs need.
func Open(cfg Config) (*Offload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Attach == "" {
		cfg.Attach = AttachAuto
	}
	names, err := cfg.interfaces()
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, tag(errors.New("offload: no interface to attach to (no Interfaces, and no interface carries a listener address)"), ErrNoInterface)
	}
	// The handle's socket lives in the calling thread's network namespace:
	// Close removes clsact filters through it from any thread.
	v4, v6 := cfg.families()
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("offload: netlink: %w", err)
	}
	plans, off, err := iface.Plans(nl, names, cfg.Mode == Auto, v4, v6)
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("offload: %w", err)
	}
	if len(plans) == 0 {
		nl.Close()
		return nil, tag(fmt.Errorf("%w: no interface Auto attaches to: %s", ErrUnsupported, strings.Join(off, ", ")), ErrNoInterface)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// to the cgroup, and RemoveMemlock then changes nothing.
	if err := rlimit.RemoveMemlock(); err != nil {
		nl.Close()
		// Raising RLIMIT_MEMLOCK needs CAP_SYS_RESOURCE.
		return nil, tag(fmt.Errorf("%w: %v", ErrUnsupported, err), ErrNoPrivilege)
	}
	o := &Offload{nl: nl, modes: map[string]InterfaceMode{}, index: map[string]int{}}
	if err := loadObjects(&o.objs); err != nil {
		nl.Close()
		return nil, unsupported("load programs", err)
	}
	if err := o.setLocals(); err != nil {
		o.Close()
		return nil, err
	}
	for _, p := range plans {
		mode := cfg.Mode
		if mode == Auto && p.Egress == EgressSameInterface {
			mode = TC // the XDP program knows only the FIB's way out
		}
		if err := o.setIface(p.Interface, p.Egress); err != nil {
			o.Close()
			return nil, fmt.Errorf("offload: interface %s settings: %w", p.Interface.Name, err)
		}
		l, im, err := o.attach(mode, cfg.Attach, p.Interface)
		if err != nil {
			o.Close()
			return nil, tag(err, ErrAttachRefused)
		}
		im.Egress, im.Why, im.Reason = p.Egress, p.Why, im.Reason+"; "+p.Egress.String()+": "+p.Reason
		if im.Hook == XDP && p.Egress != EgressFIB {
			im.Egress, im.Why, im.Reason = EgressFIB, "xdp", im.Reason+" (but the XDP program relays by FIB lookup only)"
		}
		o.links = append(o.links, l)
		o.modes[p.Interface.Name] = im
		o.ifaces = append(o.ifaces, p.Interface.Name)
		o.index[p.Interface.Name] = p.Interface.Index
	}
	o.attached = XDP
	for _, m := range o.modes {
		if m.Hook != XDP {
			o.attached = TC
		}
	}
	return o, nil
}

// attach attaches the program for mode to ifc and returns how. Auto
// takes native (driver) XDP where the driver has it, except on lo and
// veth, and tc elsewhere. A veth's XDP sees a local sender's
// CHECKSUM_PARTIAL datagrams with only a pseudo-header checksum, which it
// cannot tell from full ones, and redirected frames reach a veth's peer
// only where that peer runs XDP itself or has GRO on; tc has neither
// problem. XDP mode takes native XDP, else generic (skb) XDP. tc attaches
// as attachTC says.
func (o *Offload) attach(mode Mode, attach Attach, ifc *net.Interface) (tcattach.Detacher, InterfaceMode, error) {
	if mode == Auto && !iface.XDPCandidate(ifc) {
		mode = TC
	}
	if mode == Auto || mode == XDP {
		l, err := link.AttachXDP(link.XDPOptions{Program: o.objs.TernXdp, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err == nil {
			return l, InterfaceMode{Hook: XDP, Attach: "xdp", Reason: "native XDP"}, nil
		}
		if mode == XDP {
			l, gerr := link.AttachXDP(link.XDPOptions{Program: o.objs.TernXdp, Interface: ifc.Index, Flags: link.XDPGenericMode})
			if gerr == nil {
				return l, InterfaceMode{Hook: XDP, Attach: "xdp_generic", Reason: fmt.Sprintf("no native XDP (%v)", err)}, nil
			}
			return nil, InterfaceMode{}, unsupported(fmt.Sprintf("attach XDP to %s (native: %v)", ifc.Name, err), gerr)
		}
	}
	l, how, why, err := o.attachTC(attach, ifc)
	if err != nil {
		return nil, InterfaceMode{}, err
	}
	return l, InterfaceMode{Hook: TC, Attach: how, Reason: why}, nil
}

// Hooks returns each attached interface's hook, XDP or TC.
func (o *Offload) Hooks() map[string]Mode {
	if o == nil {
		return nil
	}
	m := make(map[string]Mode, len(o.modes))
	for k, v := range o.modes {
		m[k] = v.Hook
	}
	return m
}

// InterfaceModes returns how the programs run on each attached interface.
func (o *Offload) InterfaceModes() map[string]InterfaceMode {
	if o == nil {
		return nil
	}
	return maps.Clone(o.modes)
}

// loadObjects loads the programs and maps, telling the programs whether
// bpf_l4_csum_replace takes BPF_F_IPV6 (Linux 6.16 on): without it an
// IPv6 CHECKSUM_COMPLETE skb's csum goes wrong on pseudo-header changes
// (the receiver then verifies in software), with it an older kernel
// would refuse every IPv6 rewrite.
func loadObjects(objs *ternObjects) error {
	spec, err := loadTern()
	if err != nil {
		return err
	}
	if kernel.AtLeast(6, 16) {
		const bpfFIPv6 = 1 << 7
		if err := spec.Variables["l4_csum_ipv6_flag"].Set(uint64(bpfFIPv6)); err != nil {
			return err
		}
	}
	return spec.LoadAndAssign(objs, nil)
}

// unsupported wraps err in ErrUnsupported where it says the kernel refused
// or lacks something, and keeps other errors as they are.
func unsupported(what string, err error) error {
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		// Without CAP_PERFMON (or CAP_SYS_ADMIN) the verifier checks the
		// programs as an unprivileged user's and refuses their pointer
		// arithmetic: a missing privilege, which Auto falls back on. With
		// it, a rejection is a bug in the programs.
		if !kernel.HasCapability(unix.CAP_PERFMON) && !kernel.HasCapability(unix.CAP_SYS_ADMIN) {
			return tag(fmt.Errorf("%w: %s: the verifier refuses the programs without CAP_PERFMON: %v", ErrUnsupported, what, err), ErrNoPrivilege)
		}
		return fmt.Errorf("offload: %s: %w", what, err)
	}
	if kernel.Refused(err) {
		werr := fmt.Errorf("%w: %s: %v", ErrUnsupported, what, err)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return tag(werr, ErrNoPrivilege)
		}
		return werr
	}
	return fmt.Errorf("offload: %s: %w", what, err)
}

// interfaces returns cfg.Interfaces, or else the names of the interfaces
// that carry a listener or relay address (iface.Carrying).
func (c Config) interfaces() ([]string, error) {
	if len(c.Interfaces) > 0 {
		return c.Interfaces, nil
	}
	var want []netip.Addr
	for _, l := range c.Listeners {
		want = append(want, l.Addr())
	}
	want = append(want, c.Relays...)
	names, err := iface.Carrying(want)
	if err != nil {
		return nil, fmt.Errorf("offload: %w", err)
	}
	return names, nil
}

// Attached returns the hook the programs run on: XDP when every interface
// has XDP, TC when any has tc (Hooks tells each).
func (o *Offload) Attached() Mode {
	if o == nil {
		return None
	}
	return o.attached
}

// Interfaces returns the names of the interfaces the programs are attached to.
func (o *Offload) Interfaces() []string {
	if o == nil {
		return nil
	}
	return append([]string(nil), o.ifaces...)
}

// Put installs or replaces p (both directions). It returns an error when
// the maps are full (MaxPaths) or p is not a valid path: an address
// invalid, unspecified or of mixed families, a zero port, a channel
// number outside 0x4000-0x7FFF, a zero Expires or a Counter of
// MaxCounters or more.
func (o *Offload) Put(p Path) error {
	ck, cv, pk, pv, err := p.entries(monotonicNow())
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropStale(&ck, &cv, &pk, &pv)
	if err := o.objs.P2c.Update(&pk, &pv, ebpf.UpdateAny); err != nil {
		return full("peer->client", err)
	}
	if err := o.objs.C2p.Update(&ck, &cv, ebpf.UpdateAny); err != nil {
		_ = o.objs.P2c.Delete(&pk)
		return full("client->peer", err)
	}
	return nil
}

// dropStale deletes the other half of an entry that Put is about to
// replace with a different counterpart: the client->peer entry of the
// (client, listener, channel) the replaced peer->client entry led to, and
// the peer->client entry of the peer the replaced client->peer entry led
// to. The engine deletes a binding before it rebinds, but a stale half
// left behind would relay to the old destination.
func (o *Offload) dropStale(ck *ternC2pKey, cv *ternC2pVal, pk *ternP2cKey, pv *ternP2cVal) {
	var oldC ternC2pVal
	if o.objs.C2p.Lookup(ck, &oldC) == nil && (oldC.Relay != cv.Relay || oldC.Peer != cv.Peer ||
		oldC.RelayPort != cv.RelayPort || oldC.PeerPort != cv.PeerPort) {
		stale := ternP2cKey{Peer: oldC.Peer, Relay: oldC.Relay, PeerPort: oldC.PeerPort, RelayPort: oldC.RelayPort, Family: ck.Family}
		_ = o.objs.P2c.Delete(&stale)
	}
	var oldP ternP2cVal
	if o.objs.P2c.Lookup(pk, &oldP) == nil && (oldP.Client != pv.Client || oldP.Listener != pv.Listener ||
		oldP.ClientPort != pv.ClientPort || oldP.ListenerPort != pv.ListenerPort || oldP.Channel != pv.Channel) {
		stale := ternC2pKey{Client: oldP.Client, Listener: oldP.Listener, ClientPort: oldP.ClientPort,
			ListenerPort: oldP.ListenerPort, Channel: oldP.Channel, Family: pk.Family}
		_ = o.objs.C2p.Delete(&stale)
	}
}

func full(dir string, err error) error {
	if errors.Is(err, unix.E2BIG) {
		return fmt.Errorf("offload: %s map full (%d paths): %w", dir, MaxPaths, err)
	}
	return fmt.Errorf("offload: put %s entry: %w", dir, err)
}

// Delete withdraws p (both directions); a path not installed is no error,
// and p's Expires and Counter do not matter. It returns an error for a p
// Put would refuse for its addresses or channel number. The kernel
// relays none of p's packets that arrive after Delete returns.
func (o *Offload) Delete(p Path) error {
	if err := p.validateKey(); err != nil {
		return err
	}
	p.Expires, p.Counter = time.Unix(1, 0), 0 // not part of the keys
	ck, _, pk, _, err := p.entries(0)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	if err := o.objs.C2p.Delete(&ck); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("offload: delete client->peer entry: %w", err))
	}
	if err := o.objs.P2c.Delete(&pk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("offload: delete peer->client entry: %w", err))
	}
	return errors.Join(errs...)
}

// Counters calls fn for every counter slot that has counted something,
// with its packets and bytes summed over CPUs.
func (o *Offload) Counters(fn func(slot uint32, c Counters)) {
	var (
		slot uint32
		per  []ternSlotCounters
	)
	it := o.objs.Counters.Iterate()
	for it.Next(&slot, &per) {
		var c Counters
		for _, v := range per {
			c.ClientToPeerPackets += v.C2pPackets
			c.ClientToPeerBytes += v.C2pBytes
			c.PeerToClientPackets += v.P2cPackets
			c.PeerToClientBytes += v.P2cBytes
		}
		if c != (Counters{}) {
			fn(slot, c)
		}
	}
}

// Stats counts, summed over CPUs since Open, the packets that matched a
// Path but went to the socket path anyway, by reason, and the packets a
// failed rewrite dropped.
type Stats struct {
	// Expired packets matched a Path whose Expires had passed.
	Expired uint64
	// BadLength ChannelData claimed more bytes than its datagram carries.
	BadLength uint64
	// Padding: over 3 bytes, or non-zero bytes, after the ChannelData.
	Padding uint64
	// TooBig packets were longer than the programs move (2048 payload
	// bytes) or would exceed the egress MTU once rewritten.
	TooBig uint64
	// NoRoute: the kernel's FIB had no route to the destination.
	NoRoute uint64
	// ForwardingDisabled: net.ipv4.conf.<in>.forwarding is 0 on the
	// interface the packet arrived on, so bpf_fib_lookup refuses.
	ForwardingDisabled uint64
	// Errors: a helper failed midway through a rewrite; the packet was
	// dropped.
	Errors uint64
}

// Stats returns the pass and drop reason counters.
func (o *Offload) Stats() Stats {
	var s Stats
	fields := []*uint64{&s.Expired, &s.BadLength, &s.Padding, &s.TooBig, &s.NoRoute, &s.ForwardingDisabled, &s.Errors}
	for i, f := range fields {
		var per []uint64
		if err := o.objs.Stats.Lookup(uint32(i), &per); err != nil {
			continue
		}
		for _, v := range per {
			*f += v
		}
	}
	return s
}

// Close detaches the programs and frees the maps. Programs are attached
// through bpf_links owned by this process, so a crash detaches them too.
func (o *Offload) Close() error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for _, l := range o.links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	o.links = nil
	if o.nl != nil {
		o.nl.Close()
		o.nl = nil
	}
	if err := o.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, closeUpgrade(o.upgrade))
	o.upgrade = nil
	return errors.Join(errs...)
}

// monotonicNow returns CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// entries converts p into both directions' map keys and values, with
// p.Expires as CLOCK_MONOTONIC ns given now, that clock's reading.
func (p Path) entries(now uint64) (ternC2pKey, ternC2pVal, ternP2cKey, ternP2cVal, error) {
	var (
		ck ternC2pKey
		cv ternC2pVal
		pk ternP2cKey
		pv ternP2cVal
	)
	if err := p.validate(); err != nil {
		return ck, cv, pk, pv, err
	}
	exp := now
	if d := time.Until(p.Expires); d > 0 {
		exp += uint64(d)
	}
	ch := be16(p.Channel)
	fam := uint8(4)
	if !p.Client.Addr().Unmap().Is4() {
		fam = 6
	}
	ck = ternC2pKey{
		Client: addr16(p.Client.Addr()), Listener: addr16(p.Listener.Addr()),
		ClientPort: be16(p.Client.Port()), ListenerPort: be16(p.Listener.Port()),
		Channel: ch, Family: fam,
	}
	cv = ternC2pVal{
		Relay: addr16(p.Relay.Addr()), Peer: addr16(p.Peer.Addr()),
		RelayPort: be16(p.Relay.Port()), PeerPort: be16(p.Peer.Port()),
		Counter: p.Counter, Expires: exp,
	}
	pk = ternP2cKey{
		Peer: addr16(p.Peer.Addr()), Relay: addr16(p.Relay.Addr()),
		PeerPort: be16(p.Peer.Port()), RelayPort: be16(p.Relay.Port()),
		Family: fam,
	}
	pv = ternP2cVal{
		Client: addr16(p.Client.Addr()), Listener: addr16(p.Listener.Addr()),
		ClientPort: be16(p.Client.Port()), ListenerPort: be16(p.Listener.Port()),
		Channel: ch, Counter: p.Counter, Expires: exp,
	}
	return ck, cv, pk, pv, nil
}

// be16 returns the uint16 whose in-memory bytes are v in network order,
// as the programs read ports and channel numbers from packets.
func be16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// addr16 lays an address out as the maps do: IPv4 in the first 4 bytes.
func addr16(a netip.Addr) [16]uint8 {
	var out [16]uint8
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		copy(out[:], b[:])
	} else {
		out = a.As16()
	}
	return out
}

// families reports which IP families the listeners use (IPv4 when there
// are none).
func (c Config) families() (v4, v6 bool) {
	if len(c.Listeners) == 0 {
		return true, false
	}
	for _, l := range c.Listeners {
		if l.Addr().Unmap().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}
