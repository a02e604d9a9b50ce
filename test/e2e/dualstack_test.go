package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	stunv2 "github.com/pion/stun/v2"
	"github.com/pion/transport/v4"
	"github.com/pion/transport/v4/stdnet"
	"github.com/pion/turn/v4"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/controller"
)

// dualStackManifests are Gateway API manifests for `ternd -f`: a TURN-UDP Gateway whose
// spec.addresses name 127.0.0.1 and ::1, which asks for dual-stack (the Service would get
// ipFamilyPolicy PreferDualStack; standalone, the relay binds both addresses), and a route to
// a StaticService of both loopbacks.
const dualStackManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: local}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: local-config, namespace: local}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: local-config, namespace: local}
spec: {realm: stunner.l7mp.io, authType: plaintext, userName: user, password: pass, dataplane: local, minPort: %d, maxPort: %d}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: local}
spec: {image: ternd, disableHealthCheck: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: local}
spec:
  gatewayClassName: local
  listeners: [{name: udp, port: %d, protocol: TURN-UDP}]
  addresses: [{type: IPAddress, value: 127.0.0.1}, {type: IPAddress, value: "::1"}]
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peers, namespace: local}
spec: {prefixes: [127.0.0.1/32, "::1/128"]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: local}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: peers}]}]
`

// startDualStackGateway renders dualStackManifests with `ternd -f` and runs it; the listener
// is on the wildcard address, so it serves 127.0.0.1 and ::1.
func startDualStackGateway(t *testing.T) *server {
	t.Helper()
	port, release := freePort(t, "udp4")
	release()
	lo, hi := relayRange(t)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, dualStackManifests, lo, hi, port), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	s.start(t, exec.Command(terndBinary(t), "-f", path))
	s.waitBinding(t)
	return s
}

// relayRange returns a relay port range of 100 ports for a test of its own.
func relayRange(t *testing.T) (int, int) {
	t.Helper()
	port, release := freePort(t, "udp4")
	release()
	lo := 20000 + port%20000
	return lo, lo + 99
}

// familyClient is a raw TURN client (it can send REQUESTED-ADDRESS-FAMILY and
// ADDITIONAL-ADDRESS-FAMILY, which pion/turn's client cannot) on the loopback of one family.
func familyClient(t *testing.T, s *server, v6 bool) (*turnclient.Client, *net.UDPConn, netip.AddrPort) {
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
	server := netip.AddrPortFrom(ip, uint16(s.addr.Port))
	return turnclient.New(conn, server, turnclient.Credentials{Username: testUser, Password: testPassword}), conn, server
}

// echoThrough sends payload to peer (Send indication, or ChannelData on ch when ch is not 0)
// and waits for the peer's echo.
func echoThrough(conn *net.UDPConn, server, peer netip.AddrPort, ch uint16, payload string) error {
	frame := turnclient.ChannelData(ch, []byte(payload))
	if ch == 0 {
		var err error
		if frame, _, err = turnclient.SendIndication(peer, []byte(payload)); err != nil {
			return err
		}
	}
	if _, err := conn.WriteToUDPAddrPort(frame, server); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
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

// TestDualStackGateway: through a Gateway rendered dual-stack (`ternd -f`), an IPv6 client
// on ::1 allocates an IPv6 relayed transport address (REQUESTED-ADDRESS-FAMILY) and relays to
// an echo peer on ::1 with a Send indication and on a channel; a dual allocation
// (ADDITIONAL-ADDRESS-FAMILY) gets one relayed address of each family and relays to a peer on
// 127.0.0.1 and one on ::1; an IPv4 client of the same listener is served as before, and a
// peer of a family its allocation lacks gets 443.
func TestDualStackGateway(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not read Gateway API manifests")
	}
	s := startDualStackGateway(t)
	peer4 := startEchoPeer(t, "127.0.0.1:0").addr.AddrPort()
	peer6 := startEchoPeer(t, "[::1]:0").addr.AddrPort()
	cases := []struct {
		name  string
		v6    bool
		attrs []stunv2.Setter
		peers []netip.AddrPort // one per relayed address, of its family
	}{
		{"IPv6 client, IPv6 relay", true, []stunv2.Setter{turnclient.RequestedFamily(true)}, []netip.AddrPort{peer6}},
		{"IPv6 client, dual allocation", true, []stunv2.Setter{turnclient.AdditionalFamilyIPv6()}, []netip.AddrPort{peer4, peer6}},
		{"IPv6 client, default relay", true, nil, []netip.AddrPort{peer4}},
		{"IPv4 client, IPv6 relay", false, []stunv2.Setter{turnclient.RequestedFamily(true)}, []netip.AddrPort{peer6}},
		{"IPv4 client, dual allocation", false, []stunv2.Setter{turnclient.AdditionalFamilyIPv6()}, []netip.AddrPort{peer4, peer6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, conn, server := familyClient(t, s, tc.v6)
			relays, err := c.AllocateWith(0, tc.attrs...)
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			defer func() { _ = c.Refresh(0) }()
			if len(relays) != len(tc.peers) {
				t.Fatalf("relayed transport addresses %v, want %d", relays, len(tc.peers))
			}
			for i, peer := range tc.peers {
				want := netip.MustParseAddr("127.0.0.1")
				if peer.Addr().Is6() {
					want = netip.IPv6Loopback()
				}
				if relays[i].Addr() != want {
					t.Errorf("relayed transport address %v, want one on %v", relays[i], want)
				}
				if err := c.CreatePermission(peer); err != nil {
					t.Fatalf("CreatePermission %v: %v", peer, err)
				}
				if err := echoThrough(conn, server, peer, 0, tc.name+" send "+peer.String()); err != nil {
					t.Error(err)
				}
				ch := uint16(0x4000 + i)
				if err := c.ChannelBind(peer, ch); err != nil {
					t.Fatalf("ChannelBind %v: %v", peer, err)
				}
				if err := echoThrough(conn, server, peer, ch, tc.name+" channel "+peer.String()); err != nil {
					t.Error(err)
				}
			}
			if len(tc.peers) == 1 {
				other := peer6
				if tc.peers[0].Addr().Is6() {
					other = peer4
				}
				err := c.CreatePermission(other)
				if er, ok := err.(*turnclient.ErrorResponse); !ok || er.Code != 443 {
					t.Errorf("CreatePermission %v from a one-family allocation: %v, want 443", other, err)
				}
			}
		})
	}
}

// TestDualStackUclient runs coturn's turnutils_uclient over IPv6 through the dual-stack
// Gateway: from ::1 with an IPv6 relay (-x) to turnutils_peer on ::1, and from ::1 with a dual
// allocation (-Z, ADDITIONAL-ADDRESS-FAMILY under the drafts' code point 0x8032, two
// XOR-RELAYED-ADDRESS back) to a peer on ::1. 5 clients x 20 messages each, none lost.
func TestDualStackUclient(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not read Gateway API manifests")
	}
	uclient := requireTool(t, "turnutils_uclient")
	s := startDualStackGateway(t)
	peerPort := startTurnutilsPeerOn(t, "::1")
	const clients, messages = 5, 20
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		// Channels (uclient's default, numbers drawn in 0x4000-0x7FFF) and
		// Send indications (-s), each over an IPv6 and a dual allocation.
		{"IPv6 relay", []string{"-c", "-x"}},
		{"IPv6 relay, Send indications", []string{"-c", "-x", "-s"}},
		{"dual allocation", []string{"-Z"}},
		{"dual allocation, Send indications", []string{"-Z", "-s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{
				"-p", strconv.Itoa(s.addr.Port), "-u", testUser, "-w", testPassword,
				"-e", "::1", "-r", strconv.Itoa(peerPort),
				"-m", strconv.Itoa(clients), "-n", strconv.Itoa(messages), "-l", "100",
			}
			args = append(append(args, tc.flags...), "::1")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, uclient, args...)
			cmd.WaitDelay = 5 * time.Second
			outb, err := cmd.CombinedOutput()
			out := string(outb)
			if ctx.Err() != nil {
				t.Fatalf("turnutils_uclient %s: still running after 60 s\n%s", strings.Join(args, " "), out)
			}
			rep, ok := parseUclient(out)
			if err != nil || !ok {
				t.Fatalf("turnutils_uclient %s: %v, report found: %v\n%s", strings.Join(args, " "), err, ok, out)
			}
			if rep.sent != clients*messages || rep.received != rep.sent || rep.lost != 0 {
				t.Errorf("sent %d, received %d, lost %d; want %d sent and received\n%s", rep.sent, rep.received, rep.lost, clients*messages, out)
			}
		})
	}
}

// TestDualStackPion: the pion/turn client (which sends no address family attribute) from ::1
// through the dual-stack Gateway learns its own IPv6 address in XOR-MAPPED-ADDRESS, gets the
// default IPv4 relayed transport address and relays 10 packets to a peer on 127.0.0.1.
// pion/turn v4's client resolves its server addresses as "udp4" only, so its Net resolves
// them for both families here; everything else is pion's.
func TestDualStackPion(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not read Gateway API manifests")
	}
	s := startDualStackGateway(t)
	peer := startEchoPeer(t, "127.0.0.1:0")
	conn, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	server := net.JoinHostPort("::1", strconv.Itoa(s.addr.Port))
	std, err := stdnet.NewNet()
	if err != nil {
		t.Fatal(err)
	}
	c, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: server, TURNServerAddr: server,
		Username: testUser, Password: testPassword, Realm: testRealm, Conn: conn, Net: anyFamilyNet{std}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	mapped, err := c.SendBindingRequest()
	if err != nil || mapped.String() != conn.LocalAddr().String() {
		t.Errorf("XOR-MAPPED-ADDRESS %v (%v), want %v", mapped, err, conn.LocalAddr())
	}
	relay, err := c.Allocate()
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	defer relay.Close()
	if ip := relay.LocalAddr().(*net.UDPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("relayed transport address %v, want one on 127.0.0.1", relay.LocalAddr())
	}
	roundTrips(t, relay, peer.addr, 10)
}

// anyFamilyNet resolves UDP addresses of either family where pion/turn asks for "udp4".
type anyFamilyNet struct{ transport.Net }

func (n anyFamilyNet) ResolveUDPAddr(_, address string) (*net.UDPAddr, error) {
	return n.Net.ResolveUDPAddr("udp", address)
}

// operatorDualStackManifests is a Gateway the tern-gw.io/ip-family-policy annotation makes
// dual-stack, whose route reaches both loopbacks.
const operatorDualStackManifests = `apiVersion: v1
kind: Namespace
metadata: {name: e2e-ds}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: e2e-ds-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: e2e-ds-config, namespace: e2e-ds}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: e2e-ds-config, namespace: e2e-ds}
spec: {dataplane: e2e-ds-dataplane, realm: stunner.l7mp.io, authType: static, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: e2e-ds-dataplane}
spec: {image: ternd:e2e, disableHealthCheck: true, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: e2e-ds
  annotations: {tern-gw.io/ip-family-policy: PreferDualStack}
spec:
  gatewayClassName: e2e-ds-class
  listeners: [{name: udp, port: %d, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peers, namespace: e2e-ds}
spec: {prefixes: [127.0.0.1/32, "::1/128"]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-ds}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: peers}]}]
`

// TestOperatorDualStack: tern-operator renders a dual-stack Gateway into a real kube-apiserver,
// which accepts its Service with ipFamilyPolicy PreferDualStack (envtest's cluster is
// single-stack, which that policy allows) and its Deployment with POD_IPS from status.podIPs;
// ternd started from the ConfigMap as the pod starts it, with POD_IPS of both loopbacks, gives
// an IPv6 client on ::1 a dual allocation that relays to peers on 127.0.0.1 and ::1.
func TestOperatorDualStack(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn is not configured by the operator")
	}
	cfg := apiServer.Config(t)
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	creds := &secretVolume{dir: t.TempDir()}
	startOperator(t, creds.dir)
	port := listenerPort(t)
	testenv.Apply(t, c, fmt.Appendf(nil, operatorDualStackManifests, port))
	cfgPath := mountRendered(t, c, "e2e-ds", "gw", creds)

	var svc corev1.Service
	var dep appsv1.Deployment
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "e2e-ds", Name: "gw"}, &svc); err != nil {
			return err
		}
		return c.Get(context.Background(), client.ObjectKey{Namespace: "e2e-ds", Name: "gw"}, &dep)
	})
	if p := svc.Spec.IPFamilyPolicy; p == nil || *p != corev1.IPFamilyPolicyPreferDualStack {
		t.Errorf("Service ipFamilyPolicy %v, want PreferDualStack", p)
	}
	podIPs := false
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		podIPs = podIPs || e.Name == "POD_IPS" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIPs"
	}
	if !podIPs {
		t.Errorf("Deployment env has no POD_IPS from status.podIPs: %v", dep.Spec.Template.Spec.Containers[0].Env)
	}

	kubeconfig := apiServer.ImpersonatingKubeconfig(t, "system:serviceaccount:e2e-ds:gw")
	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	cmd := exec.Command(terndBinary(t), "-c", cfgPath, "--kubeconfig", kubeconfig, "-l", "info")
	cmd.Env = append(os.Environ(), "TERN_CONFIGMAP=e2e-ds/gw", "POD_IP=127.0.0.1", "POD_IPS=127.0.0.1,::1", "POD_NAMESPACE=e2e-ds")
	s.start(t, cmd)
	s.waitBinding(t)

	peer4 := startEchoPeer(t, "127.0.0.1:0").addr.AddrPort()
	peer6 := startEchoPeer(t, "[::1]:0").addr.AddrPort()
	tc, conn, server := familyClient(t, s, true)
	relays, err := tc.AllocateWith(0, turnclient.AdditionalFamilyIPv6())
	if err != nil || len(relays) != 2 || relays[0].Addr() != netip.MustParseAddr("127.0.0.1") || relays[1].Addr() != netip.IPv6Loopback() {
		t.Fatalf("dual allocation: %v %v, want one relayed address on 127.0.0.1 and one on ::1", relays, err)
	}
	defer func() { _ = tc.Refresh(0) }()
	for _, peer := range []netip.AddrPort{peer4, peer6} {
		if err := tc.CreatePermission(peer); err != nil {
			t.Fatalf("CreatePermission %v: %v", peer, err)
		}
		if err := echoThrough(conn, server, peer, 0, "operator dual-stack to "+peer.String()); err != nil {
			t.Error(err)
		}
	}
}
