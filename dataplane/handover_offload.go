package dataplane

import (
	"fmt"

	"github.com/tern-gw/tern/dataplane/offload"
	"github.com/tern-gw/tern/dataplane/offload/mirror"
	"github.com/tern-gw/tern/dataplane/takeover"
)

// The offload's part of a hand-over (docs/operations.md "Upgrades",
// docs/offload.md "Upgrades"): the maps, programs and bpf_links travel as
// descriptors after the relay sockets', described by the snapshot's
// offload section, so that the kernel relays ChannelData on through the
// switch. These convert between the mirror's HandoverState and the
// snapshot's section.

// offloadSnapshot returns m's fast path as a snapshot section and its
// descriptors; nil, nil when the programs are not attached.
func offloadSnapshot(m *mirror.Mirror) (*takeover.Offload, []int, error) {
	st, fds, err := m.Handover()
	if err != nil || st == nil {
		return nil, nil, err
	}
	o := &takeover.Offload{Mode: st.Mode, Attach: st.Attach, Interfaces: st.Interfaces, Listeners: st.Listeners, Relays: st.Relays,
		Maps: st.Offload.Maps, Programs: st.Offload.Programs}
	for _, hi := range st.Offload.Interfaces {
		o.Attachments = append(o.Attachments, takeover.OffloadAttachment{Interface: hi.Name, Index: uint32(hi.Index),
			Hook: string(hi.Mode.Hook), Attach: hi.Mode.Attach, Egress: string(hi.Mode.Egress), Why: hi.Mode.Why, Reason: hi.Mode.Reason,
			Link: hi.Link, OwnsQdisc: hi.OwnsQdisc})
	}
	for _, sl := range st.Slots {
		c := sl.Counts
		o.Slots = append(o.Slots, takeover.OffloadSlot{Listener: sl.Listener, Cluster: sl.Cluster,
			ClientToPeerPackets: c.ClientToPeerPackets, ClientToPeerBytes: c.ClientToPeerBytes,
			PeerToClientPackets: c.PeerToClientPackets, PeerToClientBytes: c.PeerToClientBytes})
	}
	k := st.Stats
	o.Stats = []uint64{k.Expired, k.BadLength, k.Padding, k.TooBig, k.NoRoute, k.ForwardingDisabled, k.Errors}
	return o, fds, nil
}

// adoptOffload gives s's deferred mirror the fast path of the snapshot
// section o and its descriptors fds (owned from then on), for Activate.
func (s *Server) adoptOffload(o *takeover.Offload, fds []int) error {
	st := &mirror.HandoverState{Mode: o.Mode, Attach: o.Attach, Interfaces: o.Interfaces, Listeners: o.Listeners, Relays: o.Relays,
		Offload: offload.Handover{Maps: o.Maps, Programs: o.Programs}}
	for _, a := range o.Attachments {
		st.Offload.Interfaces = append(st.Offload.Interfaces, offload.HandoverInterface{Name: a.Interface, Index: int(a.Index),
			Mode: offload.InterfaceMode{Hook: offload.Mode(a.Hook), Attach: a.Attach, Egress: offload.Egress(a.Egress), Why: a.Why, Reason: a.Reason},
			Link: a.Link, OwnsQdisc: a.OwnsQdisc})
	}
	for _, sl := range o.Slots {
		st.Slots = append(st.Slots, mirror.HandoverSlot{Listener: sl.Listener, Cluster: sl.Cluster, Counts: offload.Counters{
			ClientToPeerPackets: sl.ClientToPeerPackets, ClientToPeerBytes: sl.ClientToPeerBytes,
			PeerToClientPackets: sl.PeerToClientPackets, PeerToClientBytes: sl.PeerToClientBytes}})
	}
	var k [7]uint64
	copy(k[:], o.Stats)
	st.Stats = offload.Stats{Expired: k[0], BadLength: k[1], Padding: k[2], TooBig: k[3], NoRoute: k[4], ForwardingDisabled: k[5], Errors: k[6]}
	if err := s.offload.Adopt(st, fds); err != nil {
		return fmt.Errorf("adopting the kernel offload: %w", err)
	}
	return nil
}
