// Package mirror keeps the kernel's offload maps (dataplane/offload) in
// step with the TURN engine: it is the engine's turn.PathObserver, and
// installs each ChannelData path the engine reports (a channel binding of a
// TURN-UDP allocation with its permission, RFC 8656 §12) into the maps and
// withdraws it when the engine says it is gone, so that the kernel never
// relays what the engine would refuse. It also reopens the programs when
// the TURN-UDP listeners change and folds what the kernel relayed into the
// dataplane's counters for /metrics. See docs/offload-control.md.
package mirror

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/offload"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// putErrorLogInterval is how often a failing offload Put is logged: the
// path stays in user space, and a full map would otherwise log per
// ChannelBind.
const putErrorLogInterval = 10 * time.Second

// Mirror is the engine's turn.PathObserver when the kernel fast path
// runs: it installs each channel path the engine reports into the offload
// maps (offload.Put), replaces it when its expiry or cluster moves, and
// withdraws it (offload.Delete) when the engine says it is gone, so that
// the kernel never relays what the engine would refuse. It keeps every
// reported path, installed or not, so that reopening the programs for a
// new listener set puts them back.
type Mirror struct {
	log       *slog.Logger
	requested string // config.Offload* mode asked for
	attach    string // offloadmode.Attach* method asked for
	ifaces    []string

	mu  sync.Mutex
	off *offload.Offload // nil: every packet through sockets
	// listeners maps the TURN-UDP listener addresses the programs were
	// opened with to their listeners' names.
	listeners map[netip.AddrPort]string
	// relays maps each relay address as advertised (XOR-RELAYED-ADDRESS,
	// which the engine reports) to the address the socket binds, where
	// peers' datagrams arrive.
	relays map[netip.Addr]netip.Addr
	// relay is the relay config with bind addresses, for wildcardAddr.
	relay config.Relay
	paths map[pathKey]*mirroredPath
	// slots[i] is what counter slot i counts; slotOf its inverse.
	slots  []slotKey
	slotOf map[slotKey]uint32
	// base holds, per slot, the counts of programs closed for a reopen, so
	// that counters never go backwards.
	base        []offload.Counters
	baseStats   offload.Stats
	putErrors   uint64
	lastPutWarn time.Time
	// frozen, while not nil, holds the kernel's counts that Fold and
	// Status report during a hand-over (Freeze).
	frozen *frozen
	// zero is, per slot, what adopted programs had counted when this
	// process took them over (the predecessor's metrics carry it), and
	// zeroStats their reason counters then: Fold and Status count from
	// there.
	zero      []offload.Counters
	zeroStats offload.Stats
	// deferred: made by Deferred, Activate not yet called; pending are
	// the programs Adopt took for it, and pendingState their state.
	deferred     bool
	pending      *offload.Offload
	pendingState *HandoverState
	// reason and message say why the programs run or not
	// (offloadmode.Reason*; message is the error of the last failed
	// Open, empty while attached).
	reason, message string
}

type pathKey struct {
	ft turn.FiveTuple
	ch uint16
}

type mirroredPath struct {
	p         offload.Path
	cluster   uint32 // the cluster the engine filed the peer under
	installed bool
}

// slotKey is what one kernel counter slot counts: the packets of one
// listener to and from one cluster's peers.
type slotKey struct {
	listener string
	cluster  uint32
}

// Mode returns the engine mode in force: override (ternd's
// --offload-engine, Options.OffloadEngine) when not empty, else cfg's
// offload.engine; one of offloadmode.None, Auto, XDP or TC. An override
// that names no engine is an error naming --offload-engine.
func Mode(cfg *config.Config, override string) (string, error) {
	if override != "" {
		m, err := offloadmode.NormalizeEngine(override)
		if err != nil {
			return "", fmt.Errorf("--offload-engine: %w", err)
		}
		return m, nil
	}
	return cfg.Offload.EngineMode(), nil
}

// Attach returns the tc attach method in force: override (ternd's
// --offload-attach, Options.OffloadAttach) when not empty, else cfg's
// offload.attach; one of offloadmode.AttachAuto, TCX or Clsact. An
// override that names no method is an error naming --offload-attach.
func Attach(cfg *config.Config, override string) (string, error) {
	if override != "" {
		a, err := offloadmode.NormalizeAttach(override)
		if err != nil {
			return "", fmt.Errorf("--offload-attach: %w", err)
		}
		return a, nil
	}
	return cfg.Offload.AttachMode(), nil
}

// udpListenerAddrs returns the TURN-UDP listeners of cfg by address. A
// listener bound to a wildcard is taken at the relay's bind address of
// each family (wildcardAddr): the pod's IPs, which is where its clients'
// datagrams arrive in a Kubernetes pod.
func udpListenerAddrs(cfg *config.Config, relay config.Relay) map[netip.AddrPort]string {
	m := map[netip.AddrPort]string{}
	for _, l := range cfg.Listeners {
		ip, err := netip.ParseAddr(l.Address)
		if l.Protocol != protocol.TURNUDP || err != nil {
			continue
		}
		at := []netip.AddrPort{netip.AddrPortFrom(ip.Unmap(), uint16(l.Port))}
		if ip.IsUnspecified() {
			// A wildcard TURN-UDP listener serves both families
			// (dataplane/listener): it is taken at the relay
			// address of each.
			at = []netip.AddrPort{netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(l.Port)),
				netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(l.Port))}
		}
		for _, a := range at {
			if a = wildcardAddr(a, relay); !a.Addr().IsUnspecified() {
				m[a] = l.Name
			}
		}
	}
	return m
}

// wildcardAddr returns a, or for an unspecified IP the relay bind address
// of its family at a's port (a itself when there is none).
func wildcardAddr(a netip.AddrPort, relay config.Relay) netip.AddrPort {
	if !a.Addr().IsUnspecified() {
		return a
	}
	all := append([]config.RelayAddress{{Address: relay.Address}}, relay.ExtraAddresses...)
	for _, ra := range all {
		if ip, err := netip.ParseAddr(ra.Address); err == nil && !ip.IsUnspecified() && ip.Unmap().Is4() == a.Addr().Unmap().Is4() {
			return netip.AddrPortFrom(ip.Unmap(), a.Port())
		}
	}
	return a
}

// relayAddrs maps the advertised relay addresses of r (as Open takes it)
// to their bind addresses.
func relayAddrs(r config.Relay) map[netip.Addr]netip.Addr {
	m := map[netip.Addr]netip.Addr{}
	all := append([]config.RelayAddress{{Address: r.Address, PublicAddress: r.PublicAddress}}, r.ExtraAddresses...)
	for _, ra := range all {
		bind, err := netip.ParseAddr(ra.Address)
		if err != nil {
			continue
		}
		bind = bind.Unmap()
		m[bind] = bind
		if pub, err := netip.ParseAddr(ra.PublicAddress); err == nil {
			m[pub.Unmap()] = bind
		}
	}
	return m
}

// Open opens the offload programs in mode (offloadmode.Auto, XDP or TC)
// for the TURN-UDP listeners of cfg and its offload.interfaces, attaching
// the tc program as attach says (offloadmode.AttachAuto, TCX or Clsact;
// "" is Auto). relay is
// the relay config whose addresses the relay sockets bind (the dataplane's
// relay config with publicAddresses of this host bound instead, as the
// relay pool is given it): peers' datagrams arrive there, and a wildcard
// listener is taken at its addresses. With offloadmode.None, Open
// returns a Mirror that is not Active.
//
// Under Auto, a kernel or a process that cannot run the programs
// (offload.ErrUnsupported) leaves the Mirror inactive, with one log line
// saying why. Under XDP or TC, and for any other error, Open returns an
// error "offload engine <mode>: <reason>" wrapping offload's.
func Open(mode, attach string, cfg *config.Config, relay config.Relay, log *slog.Logger) (*Mirror, error) {
	m := &Mirror{log: log, requested: mode, attach: attach, ifaces: slices.Clone(cfg.Offload.Interfaces),
		paths: map[pathKey]*mirroredPath{}, slotOf: map[slotKey]uint32{}}
	if mode == offloadmode.None {
		m.reason = offloadmode.ReasonNotRequested
		return m, nil
	}
	m.relay = relay
	m.listeners = udpListenerAddrs(cfg, m.relay)
	m.relays = relayAddrs(m.relay)
	off, err := offload.Open(m.offloadConfig())
	m.reason = why(err)
	if err != nil {
		m.message = err.Error()
	}
	switch {
	case err == nil:
		m.off = off
		log.Info("offload attached", "engine", string(off.Attached()), "requested", mode, "listeners", len(m.listeners))
		m.logInterfaces()
	case mode == offloadmode.Auto && errors.Is(err, offload.ErrUnsupported):
		log.Warn("offload unavailable, relaying through sockets", "requested", mode, "reason", err.Error())
	default:
		return nil, fmt.Errorf("offload engine %s: %w", mode, err)
	}
	return m, nil
}

// logInterfaces logs how the programs run on each interface. The caller
// holds m.mu or has not shared m yet.
func (m *Mirror) logInterfaces() {
	modes := m.off.InterfaceModes()
	for _, name := range slices.Sorted(maps.Keys(modes)) {
		im := modes[name]
		m.log.Info("offload interface", "interface", name, "hook", string(im.Hook), "attach", im.Attach,
			"egress", string(im.Egress), "why", im.Why, "reason", im.Reason)
	}
}

func (m *Mirror) offloadConfig() offload.Config {
	c := offload.Config{Mode: offload.Mode(m.requested), Attach: offload.Attach(m.attach), Interfaces: m.ifaces}
	for a := range m.listeners {
		c.Listeners = append(c.Listeners, a)
	}
	slices.SortFunc(c.Listeners, func(a, b netip.AddrPort) int { return a.Compare(b) })
	for _, bind := range m.relays {
		if !slices.Contains(c.Relays, bind) {
			c.Relays = append(c.Relays, bind)
		}
	}
	slices.SortFunc(c.Relays, func(a, b netip.Addr) int { return a.Compare(b) })
	return c
}

// Active reports whether the programs are attached, so that the kernel
// relays: the engine needs the Mirror as its PathObserver only then.
func (m *Mirror) Active() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.off != nil
}

// Attached returns the hook in use, offloadmode.XDP or offloadmode.TC,
// or offloadmode.None when the programs are not attached (a fallen-back
// Auto, a failed reopen, or after Close).
func (m *Mirror) Attached() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.off == nil {
		return offloadmode.None
	}
	return string(m.off.Attached())
}

// PathUp implements turn.PathObserver: it installs or replaces the path.
// A path the kernel cannot take (no programs, a listener they do not
// serve, a client and peer of different IP families, full maps) stays on
// the socket path; a failed Put is counted in Status.PutErrors and logged
// at most every 10 s.
func (m *Mirror) PathUp(ev turn.PathEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := pathKey{ev.FiveTuple, ev.Channel}
	mp := m.paths[k]
	if mp == nil {
		mp = &mirroredPath{}
		m.paths[k] = mp
	}
	relay := ev.Relay
	if bind, ok := m.relays[relay.Addr().Unmap()]; ok {
		relay = netip.AddrPortFrom(bind, relay.Port())
	}
	listener := wildcardAddr(ev.FiveTuple.Server, m.relay)
	mp.p = offload.Path{
		Client:   ev.FiveTuple.Client,
		Listener: listener,
		Relay:    relay,
		Peer:     ev.Peer,
		Channel:  ev.Channel,
		Expires:  time.Unix(0, ev.Expires),
	}
	mp.cluster = ev.Cluster
	name := m.listeners[listener]
	if ev.FiveTuple.Client.Addr().Unmap().Is4() != ev.Peer.Addr().Unmap().Is4() {
		// A dual allocation's path between families (an IPv6 client
		// relaying to an IPv4 peer, or the reverse): the programs rewrite
		// headers in place and cannot change the IP version, so the
		// socket path carries it.
		name = ""
	}
	m.install(mp, name, ev.Cluster)
}

// install puts mp into the kernel under the slot of (listener, cluster),
// or leaves it to the socket path: no programs, a listener the programs
// do not serve, no slot left, or a failed Put. The caller holds m.mu.
func (m *Mirror) install(mp *mirroredPath, listener string, cluster uint32) {
	mp.p.Counter = 0
	if m.off == nil || listener == "" {
		m.withdraw(mp)
		return
	}
	slot, ok := m.slot(slotKey{listener, cluster})
	if !ok {
		m.putFailed(mp, errors.New("no counter slot left"))
		return
	}
	mp.p.Counter = slot
	if err := m.off.Put(mp.p); err != nil {
		m.putFailed(mp, err)
		return
	}
	mp.installed = true
}

// putFailed leaves mp in user space (withdrawing an earlier version, which
// may carry a stale expiry) and logs at most every putErrorLogInterval.
// The caller holds m.mu.
func (m *Mirror) putFailed(mp *mirroredPath, err error) {
	m.withdraw(mp)
	m.putErrors++
	if now := time.Now(); now.Sub(m.lastPutWarn) >= putErrorLogInterval {
		m.lastPutWarn = now
		m.log.Warn("offload: path left to the socket path", "client", mp.p.Client.String(), "peer", mp.p.Peer.String(),
			"channel", mp.p.Channel, "error", err.Error(), "failures", m.putErrors)
	}
}

// withdraw deletes mp from the kernel if it is there. The caller holds m.mu.
func (m *Mirror) withdraw(mp *mirroredPath) {
	if !mp.installed {
		return
	}
	mp.installed = false
	if m.off == nil {
		return
	}
	if err := m.off.Delete(mp.p); err != nil {
		// The kernel stops relaying it at Expires anyway.
		m.log.Warn("offload: deleting a path", "client", mp.p.Client.String(), "peer", mp.p.Peer.String(),
			"channel", mp.p.Channel, "error", err.Error())
	}
}

// slot returns the counter slot of k, numbering a new one on first use.
// The caller holds m.mu.
func (m *Mirror) slot(k slotKey) (uint32, bool) {
	if s, ok := m.slotOf[k]; ok {
		return s, true
	}
	if len(m.slots) >= offload.MaxCounters {
		return 0, false
	}
	s := uint32(len(m.slots))
	m.slots = append(m.slots, k)
	m.slotOf[k] = s
	return s, true
}

// PathDown implements turn.PathObserver: it withdraws the path.
func (m *Mirror) PathDown(ev turn.PathEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := pathKey{ev.FiveTuple, ev.Channel}
	if mp := m.paths[k]; mp != nil {
		m.withdraw(mp)
		delete(m.paths, k)
	}
}

// SetListeners follows a reconfiguration to cfg, with relay as Open takes
// it: when the set of TURN-UDP listener addresses or relay addresses
// changed, the programs are reopened for the new set and every path still
// reported goes back in, counted under the same slots. A reopen that fails leaves every
// packet to the socket path, with the reason logged. Paths of listeners
// that went are withdrawn by the engine (CloseTransport) before this runs.
func (m *Mirror) SetListeners(cfg *config.Config, relay config.Relay) {
	// A relay change restarted every listener, so no path of the old
	// relay addresses is left.
	next, relays := udpListenerAddrs(cfg, relay), relayAddrs(relay)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.off == nil || (maps.Equal(next, m.listeners) && maps.Equal(relays, m.relays)) {
		m.listeners, m.relays, m.relay = next, relays, relay
		return
	}
	m.closeLocked()
	m.listeners, m.relays, m.relay = next, relays, relay
	off, err := offload.Open(m.offloadConfig())
	m.reason, m.message = why(err), ""
	if err != nil {
		m.message = err.Error()
		m.log.Error("offload: reopening for new listeners failed, relaying through sockets", "error", err.Error())
		return
	}
	m.off = off
	m.log.Info("offload reattached for new listeners", "engine", string(off.Attached()), "listeners", len(next))
	m.logInterfaces()
	for _, mp := range m.paths {
		m.install(mp, m.listeners[mp.p.Listener], mp.cluster)
	}
}

// closeLocked keeps the counts of the programs in base and closes them.
// The caller holds m.mu.
func (m *Mirror) closeLocked() {
	if m.off == nil {
		return
	}
	for slot, c := range m.kernelCounts() {
		for slot >= len(m.base) {
			m.base = append(m.base, offload.Counters{})
		}
		m.base[slot] = addCounters(m.base[slot], c)
	}
	m.baseStats = addStats(m.baseStats, m.kernelStats())
	m.zero, m.zeroStats = nil, offload.Stats{}
	if err := m.off.Close(); err != nil {
		m.log.Warn("offload: closing", "error", err.Error())
	}
	m.off = nil
	for _, mp := range m.paths {
		mp.installed = false
	}
}

// Close detaches the programs; the socket path serves from then on. The
// counts so far stay in Fold and Status. It is safe to call more than once.
func (m *Mirror) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closeLocked()
	if m.pending != nil {
		// Adopted but never activated: the predecessor's, not ours to
		// detach.
		_ = m.pending.Release()
		m.pending, m.pendingState = nil, nil
	}
}

// Fold adds what the kernel relayed since Open (across reopens) to
// byListener, keyed by listener name, creating the entries it needs, the
// way the socket path counts it: a ChannelData datagram from a
// client is a listener rx packet of payload+4 bytes, a peer tx packet and
// a cluster tx packet of payload bytes; a datagram from a peer the other
// way round.
func (m *Mirror) Fold(byListener map[string]*stats.Sum) {
	m.mu.Lock()
	defer m.mu.Unlock()
	counts := make([]offload.Counters, len(m.slots))
	copy(counts, m.base)
	var kernel []offload.Counters
	switch {
	case m.frozen != nil:
		kernel = m.frozen.counts
	case m.off != nil:
		kernel = m.kernelCounts()
	}
	for slot, c := range kernel {
		if slot < len(counts) {
			counts[slot] = addCounters(counts[slot], c)
		}
	}
	for slot, c := range counts {
		if c == (offload.Counters{}) {
			continue
		}
		k := m.slots[slot]
		sum := byListener[k.listener]
		if sum == nil {
			sum = &stats.Sum{}
			byListener[k.listener] = sum
		}
		sum.Rx += c.ClientToPeerPackets
		sum.RxBytes += c.ClientToPeerBytes + 4*c.ClientToPeerPackets
		sum.PeerTx += c.ClientToPeerPackets
		sum.PeerTxBytes += c.ClientToPeerBytes
		sum.Tx += c.PeerToClientPackets
		sum.TxBytes += c.PeerToClientBytes + 4*c.PeerToClientPackets
		sum.PeerRx += c.PeerToClientPackets
		sum.PeerRxBytes += c.PeerToClientBytes
		sum.AddCluster(k.cluster, stats.ClusterSum{
			Rx: c.PeerToClientPackets, RxBytes: c.PeerToClientBytes,
			Tx: c.ClientToPeerPackets, TxBytes: c.ClientToPeerBytes,
		})
	}
}

func addStats(a, b offload.Stats) offload.Stats {
	a.Expired += b.Expired
	a.BadLength += b.BadLength
	a.Padding += b.Padding
	a.TooBig += b.TooBig
	a.NoRoute += b.NoRoute
	a.ForwardingDisabled += b.ForwardingDisabled
	a.Errors += b.Errors
	return a
}

// Status is what the kernel fast path does and did, for /metrics.
type Status struct {
	// Requested is the engine mode asked for (offloadmode.Auto, XDP or
	// TC; offloadmode.None for a Mirror opened with None).
	Requested string
	// Attached is the hook in use, as Attached returns it.
	Attached string
	// Paths is the number of channel paths installed in the kernel now.
	Paths int
	// PutErrors counts the paths the kernel could not take since Open
	// (full maps, no counter slot left, an invalid path); they are relayed
	// through sockets.
	PutErrors uint64
	// Kernel counts, by reason, the packets of offloaded channels the
	// programs left to the socket path or dropped, since Open (across
	// reopens).
	Kernel offload.Stats
	// Interfaces is how the programs run on each attached interface
	// (hook, tcx or clsact, egress mode and why); nil when not attached.
	Interfaces map[string]offload.InterfaceMode
	// Reason is why the programs run or not (offloadmode.Reason*), and
	// Message the error behind a fallback (empty while attached).
	Reason, Message string
}

// Status returns the state of the fast path and its counts.
func (m *Mirror) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Requested: m.requested, Attached: offloadmode.None, PutErrors: m.putErrors, Kernel: m.baseStats,
		Reason: m.reason, Message: m.message}
	if m.off != nil {
		st.Attached = string(m.off.Attached())
		if m.frozen != nil {
			st.Kernel = addStats(st.Kernel, m.frozen.stats)
		} else {
			st.Kernel = addStats(st.Kernel, m.kernelStats())
		}
		st.Interfaces = m.off.InterfaceModes()
	}
	for _, mp := range m.paths {
		if mp.installed {
			st.Paths++
		}
	}
	return st
}

// Report returns what ternd serves at offloadmode.ReportPath: st's
// engine, hook, reason and interfaces.
func (st Status) Report() offloadmode.Report {
	r := offloadmode.Report{Requested: st.Requested, Attached: st.Attached, Reason: st.Reason, Message: st.Message}
	r.Active = r.Attached != offloadmode.None && r.Attached != ""
	if len(st.Interfaces) > 0 {
		r.Interfaces = make(map[string]offloadmode.ReportInterface, len(st.Interfaces))
		for name, im := range st.Interfaces {
			r.Interfaces[name] = offloadmode.ReportInterface{Hook: string(im.Hook), Attach: im.Attach, Egress: string(im.Egress), Why: im.Why}
		}
	}
	return r
}
