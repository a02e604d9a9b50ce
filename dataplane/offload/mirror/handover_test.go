package mirror

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/offload"
	"github.com/tern-gw/tern/turn"
)

// TestDeferredRecordsOnly: a successor's deferred Mirror records the
// paths the engine reports while it imports, touching no kernel; one
// whose predecessor handed no offload over and whose engine is None stays
// inactive after Activate. Freeze, Thaw, Handover and Release of a Mirror
// without programs do nothing.
func TestDeferredRecordsOnly(t *testing.T) {
	cfg := &config.Config{Listeners: []config.Listener{{Name: "udp", Protocol: protocol.TURNUDP, Address: "127.0.0.1", Port: 3478}}}
	m := Deferred(offloadmode.None, "", cfg, config.Relay{Address: "127.0.0.1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.Close()
	ap := netip.MustParseAddrPort
	m.PathUp(turn.PathEvent{FiveTuple: turn.FiveTuple{Client: ap("127.0.0.1:5000"), Server: ap("127.0.0.1:3478"), Proto: turn.ProtoUDP},
		Relay: ap("127.0.0.1:49152"), Peer: ap("127.0.0.2:9000"), Channel: 0x4000, Expires: time.Now().Add(time.Minute).UnixNano()})
	if len(m.paths) != 1 || m.Status().Paths != 0 || m.Active() {
		t.Fatalf("deferred: %d paths recorded, status %+v, active %v; want 1 recorded, none installed", len(m.paths), m.Status(), m.Active())
	}
	if m.Activate() || m.Active() {
		t.Errorf("Activate with None and nothing adopted: reopen or active")
	}
	m.Freeze()
	st, fds, err := m.Handover()
	if st != nil || fds != nil || err != nil {
		t.Errorf("Handover without programs: %v, %v, %v; want nothing", st, fds, err)
	}
	m.Thaw()
	m.Release()
}

// TestSameAs: a predecessor's state matches a config only when the
// engine, attach method, interfaces and addresses are the same.
func TestSameAs(t *testing.T) {
	cfg := &config.Config{Listeners: []config.Listener{{Name: "udp", Protocol: protocol.TURNUDP, Address: "10.0.1.1", Port: 3478}}}
	m := Deferred(offloadmode.Auto, offloadmode.AttachAuto, cfg, config.Relay{Address: "10.0.2.1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := m.offloadConfig()
	same := HandoverState{Mode: offloadmode.Auto, Attach: offloadmode.AttachAuto, Listeners: c.Listeners, Relays: c.Relays}
	if !m.sameAs(&same) {
		t.Errorf("sameAs(%+v) false for the config it was made of", same)
	}
	for name, f := range map[string]func(*HandoverState){
		"engine":     func(s *HandoverState) { s.Mode = offloadmode.TC },
		"attach":     func(s *HandoverState) { s.Attach = offloadmode.AttachClsact },
		"interfaces": func(s *HandoverState) { s.Interfaces = []string{"eth0"} },
		"listeners":  func(s *HandoverState) { s.Listeners = nil },
		"relays":     func(s *HandoverState) { s.Relays = []netip.Addr{netip.MustParseAddr("10.0.2.9")} },
	} {
		st := same
		f(&st)
		if m.sameAs(&st) {
			t.Errorf("%s differs, sameAs true", name)
		}
	}
}

// TestSubCounters: counts less a larger zero point are 0, never a wrap.
func TestSubCounters(t *testing.T) {
	got := subCounters(offload.Counters{ClientToPeerPackets: 10, PeerToClientBytes: 5}, offload.Counters{ClientToPeerPackets: 4, PeerToClientBytes: 9})
	if got != (offload.Counters{ClientToPeerPackets: 6}) {
		t.Errorf("subCounters = %+v", got)
	}
	if s := subStats(offload.Stats{Expired: 3}, offload.Stats{Expired: 1, Errors: 2}); s != (offload.Stats{Expired: 2}) {
		t.Errorf("subStats = %+v", s)
	}
}
