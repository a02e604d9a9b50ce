// Package offload relays TURN ChannelData in the kernel: eBPF programs on
// tc (clsact) or XDP hooks rewrite a bound channel's datagrams between the
// client's 5-tuple and the relayed transport address, so that they never
// reach a socket. The TURN engine stays the authority: the dataplane
// mirrors each channel binding it may relay (a Path) into BPF maps with
// Put, withdraws it with Delete, and the kernel relays a Path only until
// its Expires instant. Anything the maps do not name passes to the socket
// path untouched.
//
// This package imports nothing from Tern but its own sub-packages (iface:
// which interfaces and how packets leave them; tcattach: tcx and clsact;
// kernel: version, capabilities, refusals); the dataplane converts the
// engine's channel events into Paths (dataplane/offload/mirror).
package offload

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tern-gw/tern/dataplane/offload/iface"
)

// Mode is STUNner's Dataplane.spec.offloadEngine, the config file's
// offload.engine and ternd's --offload-engine, as
// dataplane/config/offloadmode normalizes them.
type Mode string

// Modes. TCMux, which STUNner's enum also allows, is TC (offloadmode
// reads it so).
const (
	// None relays every packet through sockets.
	None Mode = "None"
	// Auto attaches XDP where the interface's driver supports it, tc
	// elsewhere (and always tc where the egress is EgressSameInterface),
	// skips interfaces where no egress mode works (forwarding off and
	// routes leaving by other interfaces), and falls back to None (with
	// an error the caller logs and reports) where BPF is refused, the
	// kernel is too old or no interface is left.
	Auto Mode = "Auto"
	// XDP attaches XDP programs only; Open fails where it cannot.
	XDP Mode = "XDP"
	// TC attaches tc clsact programs only; Open fails where it cannot.
	TC Mode = "TC"
)

// Attach is how the tc program is attached (Config.Attach): the config
// file's offload.attach and ternd's --offload-attach, as
// dataplane/config/offloadmode normalizes them. XDP programs attach
// through XDP links whatever it says.
type Attach string

// Attach methods.
const (
	// AttachAuto takes tcx where the kernel has it (Linux 6.6 on) and a
	// clsact qdisc with a direct-action bpf filter where tcx is refused.
	AttachAuto Attach = "Auto"
	// AttachTCX takes tcx only (a bpf_link); Open fails without it.
	AttachTCX Attach = "TCX"
	// AttachClsact takes a clsact qdisc and a direct-action bpf filter
	// through netlink (Linux 4.5 on), even where tcx would work.
	AttachClsact Attach = "Clsact"
)

// Egress is how a relayed packet leaves, per interface (InterfaceMode);
// iface.EgressFor chooses it.
type Egress = iface.Egress

// Egress modes (see iface).
const (
	EgressFIB           = iface.FIB
	EgressSameInterface = iface.SameInterface
)

// InterfaceMode is how the programs run on one interface.
type InterfaceMode struct {
	// Hook is XDP or TC.
	Hook Mode
	// Attach is "tcx", "clsact", "xdp" (native) or "xdp_generic".
	Attach string
	// Egress is how relayed packets leave.
	Egress Egress
	// Why is Egress's reason as a short code for metrics:
	// forwarding_on, loopback, single_interface (forwarding off, every
	// route leaves by this interface), forwarding_partial (on for one
	// family in use only), forwarding_off (TC or XDP asked for by name:
	// packets pass to the sockets) or xdp (the XDP program knows only
	// the FIB).
	Why string
	// Reason says why Attach and Egress were chosen, in words.
	Reason string
}

// ErrUnsupported wraps the reason offload cannot run here: BPF refused
// (no CAP_BPF/CAP_NET_ADMIN), a kernel without the program types or
// helpers, or a build for another OS. Auto callers fall back to None on it.
var ErrUnsupported = errors.New("offload: not supported")

// Errors that say more precisely why Open failed, wrapped together with
// ErrUnsupported where Auto falls back on them (dataplane/offload/mirror
// turns them into the reasons a pod reports).
var (
	// ErrNoPrivilege: the kernel refused BPF or the attachment with
	// EPERM or EACCES, or the verifier refused the programs without
	// CAP_PERFMON.
	ErrNoPrivilege = errors.New("missing privilege")
	// ErrNoInterface: no interface to attach to.
	ErrNoInterface = errors.New("no interface")
	// ErrAttachRefused: an interface refused the hook.
	ErrAttachRefused = errors.New("attach refused")
)

// tagged is err, which errors.Is also finds to be tag: it marks an error
// with one of the sentinels above without changing its message.
type tagged struct {
	error
	tag error
}

func (t tagged) Unwrap() []error { return []error{t.error, t.tag} }

// tag returns err marked as tag (nil for nil).
func tag(err, tag error) error {
	if err == nil {
		return nil
	}
	return tagged{err, tag}
}

// Path is one channel binding of a TURN-UDP allocation that the kernel may
// relay in both directions (RFC 8656 §12): ChannelData from Client to
// Listener on Channel goes out from Relay to Peer without its 4-byte
// header; a datagram from Peer to Relay goes to Client from Listener with
// the header added. Only plain TURN-UDP allocations have Paths (DTLS
// datagrams are encrypted, TCP/TLS are streams).
type Path struct {
	// Client is the client's address: the source of the allocation's 5-tuple.
	Client netip.AddrPort
	// Listener is the TURN-UDP listener address the client sends to.
	Listener netip.AddrPort
	// Relay is the allocation's relayed transport address.
	Relay netip.AddrPort
	// Peer is the peer the channel is bound to.
	Peer netip.AddrPort
	// Channel is the channel number, 0x4000-0x4FFF (0x4000-0x7FFF with
	// RFC 5766 numbers).
	Channel uint16
	// Expires is the earliest of the channel binding's, the peer
	// permission's and the allocation's expiry; from this instant on the
	// kernel passes the path's packets to the socket path, where the
	// engine refuses them.
	Expires time.Time
	// Counter is the slot (0..MaxCounters-1) whose packets and bytes the
	// kernel counts this path's traffic under; the dataplane maps slots
	// to listeners and clusters for its metrics.
	Counter uint32
}

// MaxCounters is the number of counter slots.
const MaxCounters = 4096

// Counters are the kernel's packets and bytes relayed under one counter
// slot, summed over CPUs, since Open. Bytes are ChannelData payload bytes
// (the application data), as the socket path counts them.
type Counters struct {
	ClientToPeerPackets, ClientToPeerBytes uint64
	PeerToClientPackets, PeerToClientBytes uint64
}

// Config is what Open needs.
type Config struct {
	// Mode is Auto, XDP or TC.
	Mode Mode
	// Attach is how the tc program attaches; "" is AttachAuto.
	Attach Attach
	// Interfaces names the interfaces to attach to (STUNner's
	// offloadInterfaces); empty means every interface that carries a
	// Listener or a relay address (lo for 127.0.0.0/8).
	Interfaces []string
	// Listeners are the TURN-UDP listener addresses whose ChannelData the
	// kernel may relay.
	Listeners []netip.AddrPort
	// Relays are the addresses relay sockets bind; with no Interfaces the
	// interfaces carrying them get the programs too, so that peers'
	// datagrams arriving there are relayed. Peers reached through another
	// interface (a CNI bridge, say) need Interfaces to name it.
	Relays []netip.Addr
}

// Validate reports a Config Open cannot use.
func (c Config) Validate() error {
	switch c.Mode {
	case Auto, XDP, TC:
	default:
		return fmt.Errorf("offload: mode %q: want Auto, XDP or TC", c.Mode)
	}
	switch c.Attach {
	case "", AttachAuto, AttachTCX, AttachClsact:
	default:
		return fmt.Errorf("offload: attach %q: want Auto, TCX or Clsact", c.Attach)
	}
	return nil
}

// validateKey reports a Path whose map keys cannot be built: an invalid
// or unspecified address, a zero port, mixed address families
// (IPv4-mapped IPv6 addresses count as IPv4), or a channel number outside
// 0x4000-0x7FFF (RFC 8656 §12 allows 0x4000-0x4FFF; RFC 5766 allowed up
// to 0x7FFF).
func (p Path) validateKey() error {
	addrs := []struct {
		name string
		ap   netip.AddrPort
	}{{"client", p.Client}, {"listener", p.Listener}, {"relay", p.Relay}, {"peer", p.Peer}}
	for _, a := range addrs {
		if !a.ap.IsValid() || a.ap.Port() == 0 || a.ap.Addr().Unmap().IsUnspecified() {
			return fmt.Errorf("offload: path %s address %v: want an address and a non-zero port", a.name, a.ap)
		}
		if a.ap.Addr().Unmap().Is4() != p.Client.Addr().Unmap().Is4() {
			return fmt.Errorf("offload: path %s address %v and client address %v: mixed address families", a.name, a.ap, p.Client)
		}
	}
	if p.Channel < 0x4000 || p.Channel > 0x7FFF {
		return fmt.Errorf("offload: path channel number %#04x: want 0x4000-0x7FFF", p.Channel)
	}
	return nil
}

// validate is validateKey and also refuses a zero Expires or a Counter of
// MaxCounters or more.
func (p Path) validate() error {
	if err := p.validateKey(); err != nil {
		return err
	}
	if p.Expires.IsZero() {
		return errors.New("offload: path has no Expires")
	}
	if p.Counter >= MaxCounters {
		return fmt.Errorf("offload: path counter slot %d: want 0-%d", p.Counter, MaxCounters-1)
	}
	return nil
}
