package mirror

import (
	"errors"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/offload"
)

// The hand-over of the kernel fast path to a successor ternd (ternd
// --takeover, docs/operations.md "Upgrades"). The maps, programs and
// bpf_links travel as descriptors beside the sockets (offload.Handover),
// so the kernel relays on through the switch with the same entries and
// counters, and no bpffs mount is needed. The old side: Freeze, then
// Handover for the snapshot; Thaw if the successor fails, Release once it
// confirmed. The new side: Deferred (the engine reports its paths while
// the allocations are imported, and nothing reaches the kernel), Adopt
// (before confirming: it checks the maps and loads this binary's
// programs, changing nothing), Activate (after the old one's bye).

// HandoverState is the fast path a Mirror hands over, beside the
// descriptors of State.Offload.
type HandoverState struct {
	// Mode, Attach and Interfaces are the engine, tc attach method and
	// offload.interfaces the programs were opened with; Listeners and
	// Relays the listener and relay bind addresses.
	Mode, Attach string
	Interfaces   []string
	Listeners    []netip.AddrPort
	Relays       []netip.Addr
	// Offload names the descriptors.
	Offload offload.Handover
	// Slots are the counter slots in use, by number, with the kernel's
	// counts at Freeze; Stats the kernel's reason counters then.
	Slots []HandoverSlot
	Stats offload.Stats
}

// HandoverSlot is one counter slot of a HandoverState.
type HandoverSlot struct {
	Listener string
	Cluster  uint32
	Counts   offload.Counters
}

// Freeze takes the kernel's counts once: Fold and Status report them, not
// the kernel's, until Thaw or Release, so that the counter series a
// hand-over carries (which the old process writes after Freeze) and the
// counts Handover gives the successor to count on from are one reading.
func (m *Mirror) Freeze() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.off == nil {
		return
	}
	m.frozen = &frozen{counts: m.kernelCounts(), stats: m.kernelStats()}
}

// Thaw undoes Freeze: the hand-over failed and this process serves on.
func (m *Mirror) Thaw() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.frozen = nil
}

type frozen struct {
	counts []offload.Counters
	stats  offload.Stats
}

// kernelCounts returns the programs' counts per slot, less what they
// counted before this process adopted them (m.zero). The caller holds
// m.mu and m.off is not nil.
func (m *Mirror) kernelCounts() []offload.Counters {
	counts := make([]offload.Counters, len(m.slots))
	m.off.Counters(func(slot uint32, c offload.Counters) {
		if int(slot) < len(counts) {
			counts[slot] = c
		}
	})
	for i := range counts {
		if i < len(m.zero) {
			counts[i] = subCounters(counts[i], m.zero[i])
		}
	}
	return counts
}

// kernelStats is the programs' reason counters less m.zeroStats.
func (m *Mirror) kernelStats() offload.Stats {
	return subStats(m.off.Stats(), m.zeroStats)
}

// Handover returns the fast path's state for a successor and the
// descriptors to send with it, which stay m's until Release; nil, nil
// when the programs are not attached. Call it after Freeze.
func (m *Mirror) Handover() (*HandoverState, []int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.off == nil {
		return nil, nil, nil
	}
	h, fds, err := m.off.Handover()
	if err != nil {
		return nil, nil, err
	}
	st := &HandoverState{Mode: m.requested, Attach: m.attach, Interfaces: slices.Clone(m.ifaces), Offload: h}
	c := m.offloadConfig()
	st.Listeners, st.Relays = c.Listeners, c.Relays
	// The successor counts on from the kernel's counts at Freeze, with
	// what this process adopted itself added back.
	var counts []offload.Counters
	var stats offload.Stats
	if m.frozen != nil {
		counts, stats = m.frozen.counts, m.frozen.stats
	} else {
		counts, stats = m.kernelCounts(), m.kernelStats()
	}
	for i, k := range m.slots {
		c := counts[i]
		if i < len(m.zero) {
			c = addCounters(c, m.zero[i])
		}
		st.Slots = append(st.Slots, HandoverSlot{Listener: k.listener, Cluster: k.cluster, Counts: c})
	}
	st.Stats = addStats(stats, m.zeroStats)
	return st, fds, nil
}

// Release gives the programs up to the successor that confirmed the
// hand-over: this process closes its descriptors without detaching, and
// from then on reports the counts of Freeze and touches no map (the
// engine's PathDowns for the allocations it forgets change nothing).
func (m *Mirror) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.off == nil {
		return
	}
	f := m.frozen
	if f == nil {
		f = &frozen{counts: m.kernelCounts(), stats: m.kernelStats()}
	}
	for slot, c := range f.counts {
		for slot >= len(m.base) {
			m.base = append(m.base, offload.Counters{})
		}
		m.base[slot] = addCounters(m.base[slot], c)
	}
	m.baseStats = addStats(m.baseStats, f.stats)
	m.frozen = nil
	if err := m.off.Release(); err != nil {
		m.log.Warn("offload: releasing to the successor", "error", err.Error())
	}
	m.off = nil
	m.reason, m.message = offloadmode.ReasonNotRequested, "handed over to the successor"
	for _, mp := range m.paths {
		mp.installed = false
	}
}

// Deferred returns a Mirror for a successor of a hand-over: as Open would
// make it, but without opening the programs. It records the paths the
// engine reports while the allocations are imported, and installs them
// only in Activate, so that a successor that fails before it confirms
// has changed nothing in the kernel. With offloadmode.None it is as
// Open's.
func Deferred(mode, attach string, cfg *config.Config, relay config.Relay, log *slog.Logger) *Mirror {
	m := &Mirror{log: log, requested: mode, attach: attach, ifaces: slices.Clone(cfg.Offload.Interfaces),
		paths: map[pathKey]*mirroredPath{}, slotOf: map[slotKey]uint32{}, deferred: true}
	m.relay = relay
	m.listeners = udpListenerAddrs(cfg, m.relay)
	m.relays = relayAddrs(m.relay)
	m.reason = offloadmode.ReasonNotRequested
	return m
}

// Adopt takes the fast path a predecessor handed over (st, and fds in
// its order, which m owns from then on) for Activate. It changes nothing
// in the kernel. It returns an error (offload.ErrIncompatible where the
// maps are not the ones this binary's programs use) on which the
// successor must give up: the predecessor serves on with its programs.
func (m *Mirror) Adopt(st *HandoverState, fds []int) error {
	off, err := offload.Adopt(st.Offload, fds)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending, m.pendingState = off, st
	return nil
}

// Activate starts the fast path of a successor once the hand-over is
// confirmed. With adopted programs: their counter slots and counts carry
// on, this binary's programs replace them where they differ
// (offload.Upgrade), every path the engine reported is put (replacing
// the predecessor's entry in place: the kernel relays without a gap) and
// every entry it did not report is deleted. When the config's offload
// settings or listener and relay addresses differ from the
// predecessor's, the programs are then reopened as a reconfiguration
// would (Reopen, which Activate's caller calls once the sockets are read
// again, when Activate returns true); with offload engine None they are
// detached. Without adopted programs it opens them as Open does. It logs
// what it did; a failure leaves the paths to the sockets.
func (m *Mirror) Activate() (reopen bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.deferred {
		return
	}
	m.deferred = false
	off, st := m.pending, m.pendingState
	m.pending, m.pendingState = nil, nil
	if off == nil {
		if m.requested == offloadmode.None {
			return false
		}
		m.openLocked("offload attached")
		return false
	}
	m.off = off
	m.reason, m.message = offloadmode.ReasonAttached, ""
	m.slots, m.slotOf = nil, map[slotKey]uint32{}
	m.zero = nil
	for i, s := range st.Slots {
		k := slotKey{s.Listener, s.Cluster}
		m.slots = append(m.slots, k)
		if _, ok := m.slotOf[k]; !ok {
			m.slotOf[k] = uint32(i)
		}
		m.zero = append(m.zero, s.Counts)
	}
	m.zeroStats = st.Stats
	if m.requested == offloadmode.None {
		// What the kernel relayed since the old process's reading is
		// counted (closeLocked keeps it), then the programs go.
		m.closeLocked()
		m.reason = offloadmode.ReasonNotRequested
		m.log.Info("offload: the predecessor's programs detached (offload engine None)")
		return false
	}
	if upgraded, err := off.Upgrade(); err != nil {
		m.log.Error("offload: replacing the predecessor's programs with this binary's failed; they relay on", "error", err.Error())
	} else if upgraded {
		m.log.Info("offload: the predecessor's programs replaced with this binary's")
	}
	var keep []offload.Path
	for _, mp := range m.paths {
		m.install(mp, m.listeners[mp.p.Listener], mp.cluster)
		if mp.installed {
			keep = append(keep, mp.p)
		}
	}
	pruned, err := off.Prune(keep)
	if err != nil {
		m.log.Warn("offload: deleting the predecessor's entries this process does not relay", "error", err.Error())
	}
	m.log.Info("offload adopted from the predecessor", "engine", string(off.Attached()), "paths", len(keep), "pruned", pruned,
		"slots", len(m.slots))
	m.logInterfaces()
	if m.sameAs(st) {
		return false
	}
	m.log.Info("offload: this config's offload settings or addresses differ from the predecessor's; reopening",
		"engine", m.requested, "was", st.Mode, "attach", m.attach, "wasAttach", st.Attach)
	return true
}

// Reopen detaches the programs and opens them again for m's config,
// putting every path back (the socket path relays meanwhile): after
// Activate returned true.
func (m *Mirror) Reopen() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closeLocked()
	m.openLocked("offload reattached for this config")
}

// sameAs reports whether st's settings and addresses are m's config's.
// The caller holds m.mu.
func (m *Mirror) sameAs(st *HandoverState) bool {
	c := m.offloadConfig()
	return st.Mode == m.requested && st.Attach == m.attach && slices.Equal(st.Interfaces, m.ifaces) &&
		slices.Equal(st.Listeners, c.Listeners) && slices.Equal(st.Relays, c.Relays)
}

// openLocked opens the programs for m's config and installs every path,
// as SetListeners does. The caller holds m.mu.
func (m *Mirror) openLocked(what string) {
	off, err := offload.Open(m.offloadConfig())
	m.reason, m.message = why(err), ""
	if err != nil {
		m.message = err.Error()
		if m.requested == offloadmode.Auto && errors.Is(err, offload.ErrUnsupported) {
			m.log.Warn("offload unavailable, relaying through sockets", "requested", m.requested, "reason", err.Error())
		} else {
			m.log.Error("offload: opening failed, relaying through sockets", "requested", m.requested, "error", err.Error())
		}
		return
	}
	m.off = off
	m.log.Info(what, "engine", string(off.Attached()), "requested", m.requested, "listeners", len(m.listeners))
	m.logInterfaces()
	for _, mp := range m.paths {
		m.install(mp, m.listeners[mp.p.Listener], mp.cluster)
	}
}

// Abandon closes what Adopt took without detaching anything: the
// successor gives up and the predecessor serves on.
func (m *Mirror) Abandon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending != nil {
		_ = m.pending.Release()
		m.pending, m.pendingState = nil, nil
	}
}

func subCounters(a, b offload.Counters) offload.Counters {
	return offload.Counters{
		ClientToPeerPackets: sat(a.ClientToPeerPackets, b.ClientToPeerPackets), ClientToPeerBytes: sat(a.ClientToPeerBytes, b.ClientToPeerBytes),
		PeerToClientPackets: sat(a.PeerToClientPackets, b.PeerToClientPackets), PeerToClientBytes: sat(a.PeerToClientBytes, b.PeerToClientBytes),
	}
}

func addCounters(a, b offload.Counters) offload.Counters {
	a.ClientToPeerPackets += b.ClientToPeerPackets
	a.ClientToPeerBytes += b.ClientToPeerBytes
	a.PeerToClientPackets += b.PeerToClientPackets
	a.PeerToClientBytes += b.PeerToClientBytes
	return a
}

func subStats(a, b offload.Stats) offload.Stats {
	return offload.Stats{Expired: sat(a.Expired, b.Expired), BadLength: sat(a.BadLength, b.BadLength), Padding: sat(a.Padding, b.Padding),
		TooBig: sat(a.TooBig, b.TooBig), NoRoute: sat(a.NoRoute, b.NoRoute), ForwardingDisabled: sat(a.ForwardingDisabled, b.ForwardingDisabled),
		Errors: sat(a.Errors, b.Errors)}
}

// sat is a-b, 0 where b is larger.
func sat(a, b uint64) uint64 { return a - min(a, b) }
