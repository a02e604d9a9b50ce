package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// dualConfig is a dataplane with one TURN-UDP listener on listenAddr and
// relay addresses 127.0.0.1 and ::1, whose route allows both loopbacks.
func dualConfig(t *testing.T, listenAddr string, min, max int) *config.Config {
	t.Helper()
	doc := fmt.Sprintf(`
version: v1
admin: {name: test, metricsAddress: "127.0.0.1:%d", healthAddress: "127.0.0.1:%d"}
auth: {type: static, realm: stunner.l7mp.io, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: %q, port: %d, routes: [local]}
clusters:
  - {name: local, endpoints: ["127.0.0.1/32", "::1/128"]}
relay: {address: 127.0.0.1, minPort: %d, maxPort: %d, extraAddresses: [{address: "::1"}]}
`, freePort(t, "tcp"), freePort(t, "tcp"), listenAddr, freePort(t, "udp"), min, max)
	cfg, err := config.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// familyClient is a TURN client on a loopback address of one family, talking
// to the listener at that family's loopback.
func familyClient(t *testing.T, cfg *config.Config, v6 bool) (*turnclient.Client, *net.UDPConn, netip.AddrPort) {
	t.Helper()
	network, ip := "udp4", netip.MustParseAddr("127.0.0.1")
	if v6 {
		network, ip = "udp6", netip.IPv6Loopback()
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	server := netip.AddrPortFrom(ip, uint16(cfg.Listeners[0].Port))
	c := turnclient.New(conn, server, turnclient.Credentials{Username: "user", Password: "pass"})
	c.Timeout, c.Retries = 100*time.Millisecond, 3
	return c, conn, server
}

// relayVia sends payload to peer in a Send indication and waits for the
// peer's echo in a Data indication.
func relayVia(conn *net.UDPConn, server, peer netip.AddrPort, payload string) error {
	frame, _, err := turnclient.SendIndication(peer, []byte(payload))
	if err != nil {
		return err
	}
	if _, err := conn.WriteToUDPAddrPort(frame, server); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer conn.SetReadDeadline(time.Time{})
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return fmt.Errorf("no echo of %q from %v: %w", payload, peer, err)
		}
		if p, ok := turnclient.Payload(buf[:n]); ok && string(p) == payload {
			return nil
		}
	}
}

// mappedAddr asks the listener for the client's server-reflexive address
// (Binding, XOR-MAPPED-ADDRESS).
func mappedAddr(t *testing.T, conn *net.UDPConn, server netip.AddrPort) netip.AddrPort {
	t.Helper()
	req := stun.MustBuild(stun.TransactionID, stun.BindingRequest)
	if _, err := conn.WriteToUDPAddrPort(req.Raw, server); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer conn.SetReadDeadline(time.Time{})
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("Binding: %v", err)
	}
	m := &stun.Message{Raw: buf[:n]}
	var xa stun.XORMappedAddress
	if err := m.Decode(); err != nil {
		t.Fatal(err)
	}
	v, err := m.Get(stun.AttrXORMappedAddress)
	if err != nil || xa.GetFrom(m) != nil {
		t.Fatalf("Binding response without XOR-MAPPED-ADDRESS: %v", err)
	}
	if v[1] == 2 && xa.IP.To4() != nil {
		t.Errorf("XOR-MAPPED-ADDRESS %v is an IPv4-mapped IPv6 address", xa.IP)
	}
	ip, _ := netip.AddrFromSlice(xa.IP)
	return netip.AddrPortFrom(ip.Unmap(), uint16(xa.Port))
}

// TestDualStackListener: a TURN-UDP listener on a wildcard address serves
// IPv4 and IPv6 clients, each with its own address in XOR-MAPPED-ADDRESS
// (never IPv4-mapped); a specific address serves its family only. Each
// client allocates the relay its request names (none: IPv4; IPv6;
// IPv4+IPv6 with ADDITIONAL-ADDRESS-FAMILY) and relays to echo peers of
// every family it has a relayed transport address of.
func TestDualStackListener(t *testing.T) {
	peer4 := startEchoPeer(t, "127.0.0.1").addr().AddrPort()
	peer6 := startEchoPeer(t, "::1").addr().AddrPort()
	kinds := []struct {
		name  string
		attrs []stun.Setter
		want  []netip.AddrPort // peers, by the family of each relay
	}{
		{"default", nil, []netip.AddrPort{peer4}},
		{"requested IPv6", []stun.Setter{turnclient.RequestedFamily(true)}, []netip.AddrPort{peer6}},
		{"dual", []stun.Setter{turnclient.AdditionalFamilyIPv6()}, []netip.AddrPort{peer4, peer6}},
	}
	for i, listen := range []struct {
		addr     string
		v4, v6   bool
		relayMin int
	}{
		{"0.0.0.0", true, true, 29800},
		{"::", true, true, 29820},
		{"127.0.0.1", true, false, 29840},
		{"::1", false, true, 29860},
	} {
		t.Run(listen.addr, func(t *testing.T) {
			cfg := dualConfig(t, listen.addr, listen.relayMin, listen.relayMin+19)
			opts := Options{UDPThreads: 2, RelayThreads: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if i%2 == 1 {
				opts.IOMode = IOPoller // both socket set-ups
			}
			srv, err := New(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				srv.Close()
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			for _, v6 := range []bool{false, true} {
				serves := listen.v4 && !v6 || listen.v6 && v6
				for _, k := range kinds {
					name := fmt.Sprintf("IPv6 client %v, %s", v6, k.name)
					c, conn, server := familyClient(t, cfg, v6)
					relays, err := c.AllocateWith(0, k.attrs...)
					if !serves {
						if err == nil {
							t.Errorf("%s: a listener on %s answered", name, listen.addr)
						}
						break
					}
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if got := mappedAddr(t, conn, server); got != conn.LocalAddr().(*net.UDPAddr).AddrPort() {
						t.Errorf("%s: XOR-MAPPED-ADDRESS %v, want %v", name, got, conn.LocalAddr())
					}
					if len(relays) != len(k.want) {
						t.Fatalf("%s: relayed addresses %v, want %d", name, relays, len(k.want))
					}
					for j, peer := range k.want {
						if relays[j].Addr().Is4() != peer.Addr().Is4() {
							t.Errorf("%s: relayed address %v, want the family of %v", name, relays[j], peer)
						}
						if err := c.CreatePermission(peer); err != nil {
							t.Fatalf("%s: permission for %v: %v", name, peer, err)
						}
						if err := relayVia(conn, server, peer, name+" to "+peer.String()); err != nil {
							t.Errorf("%s: %v", name, err)
						}
					}
					if len(k.want) == 1 {
						other := peer6
						if k.want[0] == peer6 {
							other = peer4
						}
						var er *turnclient.ErrorResponse
						if err := c.CreatePermission(other); !errors.As(err, &er) || er.Code != 443 {
							t.Errorf("%s: permission for %v: %v, want 443", name, other, err)
						}
					}
					if err := c.Refresh(0); err != nil {
						t.Errorf("%s: delete: %v", name, err)
					}
				}
			}
		})
	}
}

// TestDualStackStreamListeners: TURN-TCP, TURN-TLS and TURN-DTLS listeners
// on the wildcard address serve IPv4 and IPv6 clients too (package net
// listens on both families for a wildcard "tcp" or "udp" address), and a
// client of either family gets a dual allocation that relays to peers of
// both.
func TestDualStackStreamListeners(t *testing.T) {
	peer4 := startEchoPeer(t, "127.0.0.1").addr().AddrPort()
	peer6 := startEchoPeer(t, "::1").addr().AddrPort()
	cert, key := writeTestCert(t, t.TempDir(), "localhost")
	cfg := dualConfig(t, "0.0.0.0", 29880, 29899)
	protos := map[string]turnclient.Proto{"TURN-TCP": turnclient.TCP, "TURN-TLS": turnclient.TLS, "TURN-DTLS": turnclient.DTLS}
	for _, p := range []string{"TURN-TCP", "TURN-TLS", "TURN-DTLS"} {
		network := "tcp"
		if p == "TURN-DTLS" {
			network = "udp"
		}
		l := config.Listener{Name: p, Protocol: protocol.Protocol(p), Address: "0.0.0.0", Port: freePort(t, network), Routes: []string{"local"}}
		if p != "TURN-TCP" {
			l.Cert, l.Key = cert, key
		}
		cfg.Listeners = append(cfg.Listeners, l)
	}
	startWith(t, cfg)
	for _, l := range cfg.Listeners[1:] {
		for _, ip := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
			name := string(l.Protocol) + " from " + ip.String()
			tr, err := turnclient.Dial(protos[string(l.Protocol)], netip.AddrPortFrom(ip, 0), netip.AddrPortFrom(ip, uint16(l.Port)), 2*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			c := turnclient.NewOver(tr, turnclient.Credentials{Username: "user", Password: "pass"})
			c.Timeout = 100 * time.Millisecond
			relays, err := c.AllocateWith(0, turnclient.AdditionalFamilyIPv6())
			if err != nil || len(relays) != 2 {
				t.Fatalf("%s: dual allocation: %v %v", name, relays, err)
			}
			for _, peer := range []netip.AddrPort{peer4, peer6} {
				if err := c.CreatePermission(peer); err != nil {
					t.Fatalf("%s: permission for %v: %v", name, peer, err)
				}
				if err := relayOver(tr, peer, name+" to "+peer.String()); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			tr.Close()
		}
	}
}

// relayOver is relayVia over any client transport.
func relayOver(tr turnclient.Transport, peer netip.AddrPort, payload string) error {
	frame, _, err := turnclient.SendIndication(peer, []byte(payload))
	if err != nil {
		return err
	}
	if err := tr.WriteMsg(frame); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	_ = tr.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer tr.SetReadDeadline(time.Time{})
	for {
		n, err := tr.ReadMsg(buf)
		if err != nil {
			return fmt.Errorf("no echo of %q from %v: %w", payload, peer, err)
		}
		if p, ok := turnclient.Payload(buf[:n]); ok && string(p) == payload {
			return nil
		}
	}
}
