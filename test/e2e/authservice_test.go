package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/authservice"
	"github.com/tern-gw/tern/operator/controller"
	"github.com/tern-gw/tern/turn"
)

// authSecret is the shared secret of authManifests, kept in an authRef Secret as adopters do.
const authSecret = "e2e-auth-shared-secret"

// authManifests is a Gateway with ephemeral auth whose address is 127.0.0.1 (hinted in
// spec.addresses: there is no load balancer here, so the operator reports the hint in
// status), with a TURN-UDP and a TURN-TCP listener on the ports given, and a route to peers on
// 127.0.0.1. The Dataplane has no health endpoint, so the test does not depend on port 8086.
const authManifests = `apiVersion: v1
kind: Namespace
metadata: {name: e2e-auth}
---
apiVersion: v1
kind: Secret
metadata: {name: turn-auth, namespace: e2e-auth}
stringData: {type: ephemeral, secret: ` + authSecret + `}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: e2e-auth-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: e2e-auth-config, namespace: e2e-auth}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: e2e-auth-config, namespace: e2e-auth}
spec: {dataplane: e2e-auth-dataplane, realm: stunner.l7mp.io, authRef: {name: turn-auth}}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: e2e-auth-dataplane}
spec: {image: ternd:e2e, disableHealthCheck: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: e2e-auth
  annotations: {stunner.l7mp.io/enable-mixed-protocol-lb: "true"}
spec:
  gatewayClassName: e2e-auth-class
  addresses: [{type: IPAddress, value: 127.0.0.1}]
  listeners:
  - {name: udp, port: %d, protocol: TURN-UDP}
  - {name: tcp, port: %d, protocol: TURN-TCP}
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: local, namespace: e2e-auth}
spec: {prefixes: [127.0.0.1/32]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-auth}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: local}]}]
`

// startOperatorWithAuth runs tern-operator's controller and its auth service in this process,
// wired as `tern-operator run` wires them (the auth service reads the manager's cache), until
// the test ends; the rendered credentials are files in credentialsDir (see startOperator). It
// returns the auth service's base URL and its debug log.
func startOperatorWithAuth(t *testing.T, credentialsDir string) (string, *testenv.LockedBuffer) {
	t.Helper()
	logs := &testenv.LockedBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var srv *authservice.Server
	startOperator(t, credentialsDir, func(mgr manager.Manager) error {
		var err error
		srv, err = authservice.Listen("127.0.0.1:0", authservice.New(mgr.GetClient(), authservice.Options{Log: log}), log)
		if err != nil {
			return err
		}
		return mgr.Add(srv)
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("auth service log:\n%s", logs.String())
		}
	})
	return "http://" + srv.Addr().String(), logs
}

// iceAnswer is what GET /ice returns, in the field names of STUNner's auth service.
type iceAnswer struct {
	ICEServers []struct {
		URLs       []string `json:"urls"`
		Username   string   `json:"username"`
		Credential string   `json:"credential"`
	} `json:"iceServers"`
	ICETransportPolicy string `json:"iceTransportPolicy"`
}

// getJSON GETs url and decodes a 200 answer into v.
func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// uriAddr returns the host:port of a turn: URI ("turn:127.0.0.1:3478?transport=udp").
func uriAddr(t *testing.T, uri string) string {
	t.Helper()
	_, rest, ok := strings.Cut(uri, ":")
	addr, _, _ := strings.Cut(rest, "?")
	if _, _, err := net.SplitHostPort(addr); !ok || err != nil {
		t.Fatalf("%q is not a TURN URI with a host and port", uri)
	}
	return addr
}

// runUclient runs turnutils_uclient with args, bounded to 60 s, and returns its output.
func runUclient(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("turnutils_uclient %s: still running after 60 s\n%s", strings.Join(args, " "), out)
	}
	return string(out), err
}

// TestAuthServiceCredentials runs the auth service the way tern-operator does, against a real
// API server, and a real ternd serving the config the operator rendered for the same Gateway.
// The credentials /ice and / hand out allocate and relay with the pion/turn client and with
// coturn's turnutils_uclient, over the URIs they come with; a ttl of ten years gets one day (no
// authLifetime) and allocates; a username in the other order
// (<user>:<expiry>) is accepted too; a credential past its expiry is refused with 401, both one
// minted in the past and one from /ice whose ttl ran out after it had allocated.
func TestAuthServiceCredentials(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn is not configured by the operator")
	}
	uclient := requireTool(t, "turnutils_uclient")
	cfg := apiServer.Config(t)
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	creds := &secretVolume{dir: t.TempDir()}
	base, logs := startOperatorWithAuth(t, creds.dir)

	udpPort, releaseUDP := freePort(t, "udp4")
	tcpPort, releaseTCP := freePort(t, "tcp4")
	releaseUDP()
	releaseTCP()
	testenv.Apply(t, c, fmt.Appendf(nil, authManifests, udpPort, tcpPort))

	// ternd as the rendered Deployment runs it: the ConfigMap's config, the credentials Secret
	// mounted as files, POD_IP for the relay address.
	cfgPath := mountRendered(t, c, "e2e-auth", "gw", creds)
	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: udpPort}}
	cmd := exec.Command(terndBinary(t), "-c", cfgPath, "-l", "debug")
	cmd.Env = append(os.Environ(), "POD_IP=127.0.0.1")
	s.start(t, cmd)
	s.waitBinding(t)
	echo := startEchoPeer(t, "127.0.0.1:0")

	// The operator writes the Gateway's address and Programmed listeners into its status; the
	// auth service answers once its cache has them.
	query := base + "/ice?service=turn&namespace=e2e-auth&gateway=gw&username=alice&ttl=3600"
	var ice iceAnswer
	testenv.Eventually(t, 30*time.Second, func() error { return getJSON(query, &ice) })
	asked := time.Now()
	if len(ice.ICEServers) != 1 || ice.ICETransportPolicy != "all" {
		t.Fatalf("/ice answered %+v, want one ICE server and policy all", ice)
	}
	alice := ice.ICEServers[0]
	wantURLs := []string{
		fmt.Sprintf("turn:127.0.0.1:%d?transport=udp", udpPort),
		fmt.Sprintf("turn:127.0.0.1:%d?transport=tcp", tcpPort),
	}
	if strings.Join(alice.URLs, " ") != strings.Join(wantURLs, " ") {
		t.Errorf("urls %v, want %v", alice.URLs, wantURLs)
	}
	expiry, user, ok := turn.ParseEphemeralUsername(alice.Username)
	if !ok || user != "alice" || !strings.HasSuffix(alice.Username, ":alice") ||
		expiry < asked.Add(3600*time.Second-time.Minute).Unix() || expiry > asked.Add(3600*time.Second).Unix() {
		t.Errorf("username %q, want <now+3600>:alice", alice.Username)
	}
	udpAddr, tcpAddr := uriAddr(t, alice.URLs[0]), uriAddr(t, alice.URLs[1])
	if udpAddr != s.addr.String() {
		t.Fatalf("the UDP URI's address %s is not ternd's listener %s", udpAddr, s.addr)
	}

	t.Run("pion", func(t *testing.T) {
		cl := newPionClient(t, s, alice.Username, alice.Credential)
		roundTrips(t, cl.allocate(t), echo.addr, 5)
		cl.assertQuiet(t)
	})

	// turnutils_uclient: 2 clients x 20 messages, with Send indications (-s): its random
	// channel numbers are RFC 5766's, outside what the rendered config accepts (RFC 8656).
	peerPort := startTurnutilsPeer(t)
	uclientRelays := func(t *testing.T, username, password, addr string, flags ...string) {
		t.Helper()
		host, port, _ := net.SplitHostPort(addr)
		args := append([]string{"-p", port, "-u", username, "-w", password, "-e", "127.0.0.1",
			"-r", strconv.Itoa(peerPort), "-m", "2", "-n", "20", "-l", "100", "-c", "-s"}, flags...)
		out, err := runUclient(t, uclient, append(args, host)...)
		rep, ok := parseUclient(out)
		if err != nil || !ok || rep.sent != 40 || rep.received != 40 || rep.lost != 0 {
			t.Fatalf("turnutils_uclient %s: %v; report %+v (found %t), want 40 sent and received\n%s",
				strings.Join(args, " "), err, rep, ok, out)
		}
	}
	t.Run("turnutils_uclient UDP", func(t *testing.T) { uclientRelays(t, alice.Username, alice.Credential, udpAddr) })
	t.Run("turnutils_uclient TCP", func(t *testing.T) { uclientRelays(t, alice.Username, alice.Credential, tcpAddr, "-t") })

	t.Run("TURN REST API answer", func(t *testing.T) {
		var rest struct {
			Username string   `json:"username"`
			Password string   `json:"password"`
			TTL      int64    `json:"ttl"`
			URIs     []string `json:"uris"`
		}
		if err := getJSON(base+"/?service=turn&namespace=e2e-auth&gateway=gw&listener=udp&username=bob", &rest); err != nil {
			t.Fatal(err)
		}
		// No ttl asked and no authLifetime: STUNner's default of one day.
		if rest.TTL != 86400 || len(rest.URIs) != 1 || rest.URIs[0] != wantURLs[0] || !strings.HasSuffix(rest.Username, ":bob") {
			t.Fatalf("/ answered %+v", rest)
		}
		cl := newPionClient(t, s, rest.Username, rest.Password)
		roundTrips(t, cl.allocate(t), echo.addr, 3)
		cl.assertQuiet(t)
	})

	t.Run("ttl capped", func(t *testing.T) {
		// Ten years asked, no authLifetime: the credential gets one day, and allocates.
		var capped iceAnswer
		if err := getJSON(base+"/ice?service=turn&namespace=e2e-auth&gateway=gw&listener=udp&username=frank&ttl=315360000", &capped); err != nil {
			t.Fatal(err)
		}
		srv := capped.ICEServers[0]
		expiry, _, ok := turn.ParseEphemeralUsername(srv.Username)
		if now := time.Now(); !ok || expiry > now.Add(86400*time.Second).Unix() || expiry < now.Add(86400*time.Second-time.Minute).Unix() {
			t.Fatalf("username %q, want an expiry one day from now", srv.Username)
		}
		cl := newPionClient(t, s, srv.Username, srv.Credential)
		roundTrips(t, cl.allocate(t), echo.addr, 1)
		cl.assertQuiet(t)
	})

	t.Run("user first", func(t *testing.T) {
		username := "carol:" + strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
		password := authservice.Password(authSecret, username)
		cl := newPionClient(t, s, username, password)
		roundTrips(t, cl.allocate(t), echo.addr, 3)
		cl.assertQuiet(t)
		uclientRelays(t, username, password, udpAddr)
	})

	t.Run("minted expired", func(t *testing.T) {
		username, password := authservice.Mint(authSecret, "dave", time.Now().Add(-time.Minute))
		_, err := newPionClient(t, s, username, password).Allocate()
		wantTURNError(t, err, int(stun.CodeUnauthorized))
		host, port, _ := net.SplitHostPort(udpAddr)
		out, err := runUclient(t, uclient, "-p", port, "-u", username, "-w", password, "-e", "127.0.0.1",
			"-r", strconv.Itoa(peerPort), "-m", "1", "-n", "5", "-c", "-s", host)
		if err == nil || !strings.Contains(out, "Cannot complete Allocation") {
			t.Fatalf("turnutils_uclient with an expired credential: %v, want an allocation failure\n%s", err, out)
		}
	})

	t.Run("refused after the ttl", func(t *testing.T) {
		var short iceAnswer
		if err := getJSON(base+"/ice?service=turn&namespace=e2e-auth&gateway=gw&listener=udp&username=erin&ttl=5", &short); err != nil {
			t.Fatal(err)
		}
		srv := short.ICEServers[0]
		expiry, _, ok := turn.ParseEphemeralUsername(srv.Username)
		if !ok {
			t.Fatalf("username %q has no expiry", srv.Username)
		}
		// Allocated with at least 5 s to spare (the expiry second counts as valid).
		cl := newPionClient(t, s, srv.Username, srv.Credential)
		roundTrips(t, cl.allocate(t), echo.addr, 1)
		// ternd refuses it once its expiry second has passed by its own clock, which is
		// coarse (a tick every 5 ms, later on a loaded machine: CI at 9d704b9 allocated
		// right at the second's turn). A second of margin.
		for time.Now().Unix() <= expiry+1 {
			time.Sleep(100 * time.Millisecond)
		}
		_, err := newPionClient(t, s, srv.Username, srv.Credential).Allocate()
		wantTURNError(t, err, int(stun.CodeUnauthorized))
	})

	// The auth service's log names requests, never a secret or a credential it handed out.
	out := logs.String()
	if !strings.Contains(out, `"msg":"auth request answered"`) {
		t.Errorf("the auth service logged no request:\n%s", out)
	}
	for _, secret := range []string{authSecret, alice.Credential} {
		if strings.Contains(out, secret) {
			t.Errorf("the auth service's log holds %q", secret)
		}
	}
}
