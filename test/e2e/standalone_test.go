package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pion/stun/v3"

	"github.com/tern-gw/tern/internal/testenv"
)

// standaloneManifests are Gateway API manifests for `ternd -f`: a TURN-UDP Gateway on 127.0.0.1
// whose route reaches the StaticService prefixes given by the second verb.
const standaloneManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: local}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: local-config, namespace: local}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: local-config, namespace: local}
spec: {realm: stunner.l7mp.io, authType: plaintext, userName: user, password: pass, dataplane: local}
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
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peers, namespace: local}
spec: {prefixes: %s}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: local}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: peers}]}]
`

// TestStandaloneGatewayFile runs `ternd -f -w` on Gateway API manifests, with no cluster: the
// renderer tern-operator uses turns them into the config, a pion/turn client relays to a peer
// the StaticService names and is refused one it does not, and an edit of the file that adds
// the second peer's prefix is applied live while the first allocation keeps relaying.
func TestStandaloneGatewayFile(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not read Gateway API manifests")
	}
	port, release := freePort(t, "udp4")
	release()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(prefixes string) {
		t.Helper()
		// Write and rename, as editors and ConfigMap volumes do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, standaloneManifests, port, prefixes), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("[127.0.0.1/32]")

	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	s.start(t, exec.Command(terndBinary(t), "-f", path, "-w"))
	s.waitBinding(t)

	c, relay, near, far := relayAcrossAllowlistEdit(t, s, "the StaticService", write)
	roundTrips(t, relay, near.addr, 5)
	c.assertQuiet(t)
	if n, _ := far.received(); n != 5 {
		t.Errorf("peer %v received %d packets, want the 5 sent after the edit", far.addr, n)
	}
}

// relayAcrossAllowlistEdit allocates through s and relays to an echo peer on 127.0.0.1, checks
// that a peer on 127.0.0.2, outside what (the config's peers), is refused with 403, then calls
// write to widen the peers to both addresses and relays to the second one: a config edit that
// reaches a running ternd while its allocation stays. It returns the client, its relay and the
// two peers for further checks.
func relayAcrossAllowlistEdit(t *testing.T, s *server, what string, write func(endpoints string)) (c *pionClient, relay net.PacketConn, near, far *peer) {
	t.Helper()
	near = startEchoPeer(t, "127.0.0.1:0")
	far = startEchoPeer(t, "127.0.0.2:0")
	c = newPionClient(t, s, testUser, testPassword)
	relay = c.allocate(t)
	roundTrips(t, relay, near.addr, 5)
	if m := c.transact(t, stun.MethodCreatePermission, peerAddress(far.addr)); errorCode(m) != 403 {
		t.Fatalf("CreatePermission to %v outside %s: error %d, want 403", far.addr, what, errorCode(m))
	}
	write("[127.0.0.1/32, 127.0.0.2/32]")
	testenv.Eventually(t, 10*time.Second, func() error {
		if m := c.transact(t, stun.MethodCreatePermission, peerAddress(far.addr)); errorCode(m) != 0 {
			return fmt.Errorf("CreatePermission to %v after the edit: error %d", far.addr, errorCode(m))
		}
		return nil
	})
	roundTrips(t, relay, far.addr, 5)
	return c, relay, near, far
}
