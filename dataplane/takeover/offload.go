package takeover

import (
	"fmt"
	"net/netip"
)

// The offload section of a Snapshot (Version 3 on): what the successor
// needs to adopt the kernel fast path that relays on through the switch
// (dataplane/offload Handover, dataplane/offload/mirror). After the
// counters and the TURN-DTLS section (dtls.go), the payload has a byte, 0 (no offload section) or 1, and then:
//
//	mode string16, attach string16
//	interfaces uint16, each string16 (the config's offload.interfaces)
//	listeners uint16, each addr (the listener addresses the programs serve)
//	relays uint16, each addr with port 0 (the relay bind addresses)
//	maps uint16, each string16 (one descriptor each, after the relays')
//	programs uint16, each string16 (one descriptor each, after the maps')
//	attachments uint16, each:
//	  interface string16, index uint32, hook string16, attach string16,
//	  egress string16, why string16, reason string16,
//	  flags uint8 (1: a bpf_link descriptor follows the programs', in
//	  attachment order; 2: the clsact qdisc is Tern's)
//	slots uint16, each: listener string16, cluster uint32,
//	  clientToPeer packets, bytes, peerToClient packets, bytes (uint64)
//	stats uint16, each uint64
//
// The slots' counts and the stats are the kernel's at the moment the
// exporting ternd took its counter series (Snapshot.Counters), which
// already hold them: the successor counts from there on.

// Offload is the kernel fast path handed over with a Snapshot.
type Offload struct {
	// Mode and Attach are the engine and tc attach method the exporting
	// ternd ran with; Interfaces its offload.interfaces.
	Mode, Attach string
	Interfaces   []string
	// Listeners and Relays are the addresses the programs were opened for.
	Listeners []netip.AddrPort
	Relays    []netip.Addr
	// Maps and Programs name the descriptors that follow the relays', in
	// order.
	Maps, Programs []string
	// Attachments are the interfaces the programs are attached to.
	Attachments []OffloadAttachment
	// Slots are the kernel's counter slots in use, by slot number.
	Slots []OffloadSlot
	// Stats are the kernel's pass and drop reason counters.
	Stats []uint64
}

// OffloadAttachment is one attached interface of an Offload.
type OffloadAttachment struct {
	Interface string
	Index     uint32
	// Hook, Attach, Egress, Why and Reason are its
	// dataplane/offload.InterfaceMode.
	Hook, Attach, Egress, Why, Reason string
	// Link: a bpf_link descriptor (tcx, XDP) follows; OwnsQdisc: the
	// clsact qdisc was added by Tern.
	Link, OwnsQdisc bool
}

// OffloadSlot is one kernel counter slot of an Offload: what it counts
// (a listener's packets to and from one cluster) and its counts.
type OffloadSlot struct {
	Listener                               string
	Cluster                                uint32
	ClientToPeerPackets, ClientToPeerBytes uint64
	PeerToClientPackets, PeerToClientBytes uint64
}

// FDs returns how many descriptors travel with o (0 for nil).
func (o *Offload) FDs() int {
	if o == nil {
		return 0
	}
	n := len(o.Maps) + len(o.Programs)
	for _, a := range o.Attachments {
		if a.Link {
			n++
		}
	}
	return n
}

const (
	attachLink      = 1
	attachOwnsQdisc = 2
)

func (w *writer) offload(o *Offload) {
	if o == nil {
		w.b = append(w.b, 0)
		return
	}
	w.b = append(w.b, 1)
	w.str16(o.Mode, "offload.mode")
	w.str16(o.Attach, "offload.attach")
	w.strs16(o.Interfaces, "offload.interfaces")
	w.count16(len(o.Listeners), "offload.listeners")
	for i, l := range o.Listeners {
		w.addr(l, fmt.Sprintf("offload.listeners[%d]", i))
	}
	w.count16(len(o.Relays), "offload.relays")
	for i, r := range o.Relays {
		w.addr(netip.AddrPortFrom(r, 0), fmt.Sprintf("offload.relays[%d]", i))
	}
	w.strs16(o.Maps, "offload.maps")
	w.strs16(o.Programs, "offload.programs")
	w.count16(len(o.Attachments), "offload.attachments")
	for i, a := range o.Attachments {
		f := fmt.Sprintf("offload.attachments[%d]", i)
		w.str16(a.Interface, f+".interface")
		w.u32(a.Index)
		for _, s := range []string{a.Hook, a.Attach, a.Egress, a.Why, a.Reason} {
			w.str16(s, f)
		}
		var flags byte
		if a.Link {
			flags |= attachLink
		}
		if a.OwnsQdisc {
			flags |= attachOwnsQdisc
		}
		w.b = append(w.b, flags)
	}
	w.count16(len(o.Slots), "offload.slots")
	for i, s := range o.Slots {
		w.str16(s.Listener, fmt.Sprintf("offload.slots[%d].listener", i))
		w.u32(s.Cluster)
		w.u64(s.ClientToPeerPackets)
		w.u64(s.ClientToPeerBytes)
		w.u64(s.PeerToClientPackets)
		w.u64(s.PeerToClientBytes)
	}
	w.count16(len(o.Stats), "offload.stats")
	for _, v := range o.Stats {
		w.u64(v)
	}
}

func (w *writer) strs16(ss []string, field string) {
	w.count16(len(ss), field)
	for i, s := range ss {
		w.str16(s, fmt.Sprintf("%s[%d]", field, i))
	}
}

func (r *reader) offload() *Offload {
	switch r.u8() {
	case 0:
		return nil
	case 1:
	default:
		r.fail("offload: presence byte not 0 or 1")
		return nil
	}
	o := &Offload{Mode: r.str16(), Attach: r.str16()}
	o.Interfaces = r.strs16()
	for range r.count(int(r.u16()), 7) {
		o.Listeners = append(o.Listeners, r.addr())
	}
	for range r.count(int(r.u16()), 7) {
		a := r.addr()
		if r.err == nil && a.Port() != 0 {
			r.fail("offload: relay address with a port")
		}
		o.Relays = append(o.Relays, a.Addr())
	}
	o.Maps = r.strs16()
	o.Programs = r.strs16()
	for range r.count(int(r.u16()), 17) {
		a := OffloadAttachment{Interface: r.str16(), Index: r.u32()}
		a.Hook, a.Attach, a.Egress, a.Why, a.Reason = r.str16(), r.str16(), r.str16(), r.str16(), r.str16()
		flags := r.u8()
		if r.err == nil && flags&^(attachLink|attachOwnsQdisc) != 0 {
			r.fail(fmt.Sprintf("offload: attachment %q flags %#x", a.Interface, flags))
		}
		a.Link, a.OwnsQdisc = flags&attachLink != 0, flags&attachOwnsQdisc != 0
		o.Attachments = append(o.Attachments, a)
	}
	for range r.count(int(r.u16()), 38) {
		s := OffloadSlot{Listener: r.str16(), Cluster: r.u32()}
		s.ClientToPeerPackets, s.ClientToPeerBytes = r.u64(), r.u64()
		s.PeerToClientPackets, s.PeerToClientBytes = r.u64(), r.u64()
		o.Slots = append(o.Slots, s)
	}
	for range r.count(int(r.u16()), 8) {
		o.Stats = append(o.Stats, r.u64())
	}
	if r.err != nil {
		return nil
	}
	return o
}

func (r *reader) strs16() []string {
	var out []string
	for range r.count(int(r.u16()), 2) {
		out = append(out, r.str16())
	}
	return out
}
