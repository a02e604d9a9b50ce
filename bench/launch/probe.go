package launch

import (
	"errors"
	"net"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/forwarder"
	"github.com/tern-gw/tern/bench/netns"
)

// probe sends one readiness request to t from the launcher's ClientNS.
func (l *Launcher) probe(t bench.Target) error {
	return netns.Do(l.ClientNS, func() error { return probe(t) })
}

// probe sends one readiness request to t and waits 200 ms for the answer,
// from 127.0.0.1 to a loopback target, from any address otherwise.
func probe(t bench.Target) error {
	local := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	if !t.Addr.Addr().IsLoopback() {
		local = &net.UDPAddr{IP: net.IPv4zero}
	}
	conn, err := net.ListenUDP("udp4", local)
	if err != nil {
		return err
	}
	defer conn.Close()
	var (
		req []byte
		tid [stun.TransactionIDSize]byte
	)
	if t.Kind == bench.KindRaw {
		req = forwarder.Control(forwarder.OpBind, conn.LocalAddr().(*net.UDPAddr).AddrPort())
	} else {
		m, err := stun.Build(stun.TransactionID, stun.BindingRequest, stun.Fingerprint)
		if err != nil {
			return err
		}
		req, tid = m.Raw, m.TransactionID
	}
	if _, err := conn.WriteToUDPAddrPort(req, t.Addr); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		// Only t's answer counts. The ephemeral port may have been another test's TURN
		// client a moment ago, whose server still sends it Data indications (STUN messages
		// too): those are not an answer from t.
		if from.Addr().Unmap() != t.Addr.Addr().Unmap() || from.Port() != t.Addr.Port() {
			continue
		}
		if t.Kind == bench.KindRaw {
			_, _ = conn.WriteToUDPAddrPort(forwarder.Control(forwarder.OpUnbind, t.Addr), t.Addr)
			if _, _, ok := forwarder.ParseControl(buf[:n]); !ok {
				return errors.New("not a forwarder reply")
			}
			return nil
		}
		var m stun.Message
		if err := stun.Decode(buf[:n], &m); err != nil || m.TransactionID != tid {
			return errors.New("not a STUN reply to the probe")
		}
		return nil
	}
}
