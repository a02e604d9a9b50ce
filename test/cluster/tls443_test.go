//go:build cluster

package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestTLS443's Gateway, made by the chart's gateway.tls443 values: one TLS listener on port
// 443 (ternd on tls443TargetPort in its pod) beside the HTTPS server https-upstream.
const (
	tls443Gateway    = "tls-gateway"
	tls443Selector   = "stunner.l7mp.io/related-gateway-name=" + tls443Gateway
	tls443Listener   = "tls-listener"
	tls443Port       = 443
	tls443TargetPort = 44321
	tls443Secret     = "turn-example-com-tls"
	tls443TURNName   = "turn.example.com"
	tls443WebName    = "www.example.com"
	upstreamPort     = 8443 // https-upstream's targetPort
	tls443LBAddress  = "192.0.2.10"
)

// tls443Route attaches the media servers to the TLS listener.
const tls443Route = `apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: tls443-route, namespace: stunner}
spec:
  parentRefs: [{name: tls-gateway, sectionName: tls-listener}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
`

// TestTLS443 is issue 23's "TURN-TLS beside HTTPS on one port" on the real node, set up as
// docs/operations.md's "With Helm" says: helm upgrade with gateway.tls443 (and a GatewayClass
// of the chart's) makes the Gateway tls-gateway, its TLS listener on 443 with ternd's
// certificate from a kubernetes.io/tls Secret and the tern-gw.io/tls-upstream annotation
// naming the ClusterIP of the Service https-upstream (this cluster runs no DNS server), an
// HTTPS server with HTTP/2 and a certificate of its own, served by the test in a pause pod's
// network namespace. Through the Gateway's Service (ClusterIP and node port), from the control
// plane's network namespace:
//   - pion/turn over TLS, with ALPN stun.turn (and an SNI that is not a TURN name) and with the
//     SNI turn.example.com (and no ALPN), gets ternd's certificate, allocates and relays to the
//     echo behind the UDPRoute with no loss;
//   - HTTPS GETs with ALPN h2 and with http/1.1 and the SNI www.example.com get the upstream's
//     own certificate (byte for byte) and its page, in the protocol asked for;
//   - every such request reaches the upstream from the ternd pod (spliced by ternd);
//   - a ClientHello that stalls after 3 bytes and one cut short are closed by ternd, and the
//     upstream sees no connection for them;
//   - the Gateway is Accepted, Programmed once its LoadBalancer Service has an address (written
//     into the Service's status here: this cluster has no load-balancer controller), its
//     listener Accepted, ResolvedRefs and Programmed with the route attached.
func TestTLS443(t *testing.T) {
	dir := cluster(t)
	tag := installOperator(t)
	root := repoRoot(t)
	_, err := exec.LookPath("turnutils_peer")
	testenv.Require(t, "turnutils_peer (hack/test-deps.sh installs coturn)", err)
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	testdata := func(name string) string { return filepath.Join(root, "test", "cluster", "testdata", name) }
	start := time.Now()

	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "apply", "-f", testdata("https-upstream.yaml"))
	t.Cleanup(func() { _, _ = tryRun(nil, "kubectl", "delete", "--wait=false", "-f", testdata("https-upstream.yaml")) })
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "deployment/https-upstream", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	startPeer(t, dir, echo)

	// The two certificates: ternd's (from the Secret) and the upstream's own.
	certs := t.TempDir()
	terndCert, terndKey, err := selfsigned.Write(filepath.Join(certs, "ternd"), tls443TURNName, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	webCert, webKey, err := selfsigned.Write(filepath.Join(certs, "web"), tls443WebName, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secret := kubectl(t, "-n", gatewayNamespace, "create", "secret", "tls", tls443Secret, "--cert", terndCert, "--key", terndKey,
		"--dry-run=client", "-o", "yaml")
	run(t, []byte(secret), "kubectl", "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = tryRun(nil, "kubectl", "-n", gatewayNamespace, "delete", "secret", tls443Secret, "--ignore-not-found", "--wait=false")
	})

	// The upstream: HTTPS in the https-upstream pod's network namespace.
	web := runningPods(t, "media-plane", "app=https-upstream")[0]
	webLn, err := listenTCPIn("/proc/"+strconv.Itoa(sandboxPID(t, dir, web.name))+"/ns/net", ":"+strconv.Itoa(upstreamPort))
	if err != nil {
		t.Fatal(err)
	}
	var upMu sync.Mutex
	var upstreamFrom []string
	var upstreamConns int // connections the upstream accepted
	webSrv := &http.Server{
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				upMu.Lock()
				upstreamConns++
				upMu.Unlock()
			}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			upMu.Lock()
			upstreamFrom = append(upstreamFrom, r.RemoteAddr)
			upMu.Unlock()
			fmt.Fprintf(w, "hello from the upstream over %s for %s\n", r.Proto, r.TLS.ServerName)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() { _ = webSrv.ServeTLS(webLn, webCert, webKey) }()
	t.Cleanup(func() { _ = webSrv.Close() })
	upstreamIP := strings.TrimSpace(kubectl(t, "-n", "media-plane", "get", "service", "https-upstream", "-o", "jsonpath={.spec.clusterIP}"))
	if net.ParseIP(upstreamIP) == nil {
		t.Fatalf("Service media-plane/https-upstream has no ClusterIP: %q", upstreamIP)
	}
	upstream := net.JoinHostPort(upstreamIP, "443")

	// The chart's gateway.tls443, as docs/operations.md's "With Helm".
	// The Dataplane's network as the tests before left it (TestTURNRelay's ends on hostNetwork),
	// kept here and restored as it was.
	hostNetwork := kubectl(t, "get", "dataplane", "default", "-o", "jsonpath={.spec.hostNetwork}") == "true"
	vals := chartValues(tag, hostNetwork)
	vals["gatewayClass"] = map[string]any{
		"enabled": true,
		"name":    "tls443-class",
		"gatewayConfig": map[string]any{
			"name":    "tls443-config",
			"authRef": map[string]any{"name": "stunner-auth-secret", "namespace": gatewayNamespace},
		},
	}
	vals["gateway"] = map[string]any{
		"name":      tls443Gateway,
		"namespace": gatewayNamespace,
		"tls443": map[string]any{
			"enabled":           true,
			"certificateSecret": tls443Secret,
			"targetPort":        tls443TargetPort,
			"upstream": map[string]any{
				"address":         upstream,
				"turnServerNames": []any{tls443TURNName},
			},
		},
	}
	helmUpgrade(t, vals)
	t.Cleanup(func() {
		_, _ = tryRun([]byte(tls443Route), "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
		helmUpgrade(t, chartValues(tag, hostNetwork))
	})
	run(t, []byte(tls443Route), "kubectl", "apply", "-f", "-")
	if got := kubectl(t, "-n", gatewayNamespace, "get", "gateway", tls443Gateway, "-o",
		`jsonpath={.metadata.annotations.tern-gw\.io/tls-upstream}`); !strings.Contains(got, upstream) {
		t.Fatalf("Gateway %s: tern-gw.io/tls-upstream %q, want it to name %s", tls443Gateway, got, upstream)
	}

	var servers []string
	var ternd pod
	step("GatewayReady", func(t *testing.T) {
		testenv.Eventually(t, 180*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, tls443Selector)
			if err != nil || len(pods) != 1 {
				return fmt.Errorf("want one Ready ternd pod for %s, have %v (%v)", tls443Gateway, pods, err)
			}
			ternd = pods[0]
			return nil
		})
		servers = tls443Servers(t)
		t.Logf("Gateway %s: ternd pod %s, TURN-TLS and HTTPS at %v, upstream %s; %.1fs after the test began",
			tls443Gateway, ternd, servers, upstream, time.Since(start).Seconds())
	})

	// The Service is a LoadBalancer (the chart's Gateway sets no service-type annotation) and
	// this cluster has no load-balancer controller: Programmed waits for its address
	// (AddressNotAssigned) until the Service's status has an ingress, written here as a
	// load-balancer controller would (192.0.2.10, TEST-NET-1: an address no client uses).
	step("Status", func(t *testing.T) {
		testenv.Eventually(t, 60*time.Second, func() error { return tls443Status("False", "AddressNotAssigned") })
		kubectl(t, "-n", gatewayNamespace, "patch", "service", tls443Gateway, "--subresource=status", "--type=merge",
			"-p", `{"status":{"loadBalancer":{"ingress":[{"ip":"`+tls443LBAddress+`"}]}}}`)
		testenv.Eventually(t, 60*time.Second, func() error { return tls443Status("True", "Programmed") })
		if got := kubectl(t, "-n", gatewayNamespace, "get", "gateway", tls443Gateway, "-o", "jsonpath={.status.addresses[*].value}"); got != tls443LBAddress {
			t.Errorf("Gateway %s: status.addresses %q, want the Service's ingress %s", tls443Gateway, got, tls443LBAddress)
		}
		t.Logf("Gateway %s: Accepted; Programmed False (AddressNotAssigned) until its LoadBalancer Service had an ingress, then True with address %s; listener %s Accepted, ResolvedRefs, Programmed, 1 route attached",
			tls443Gateway, tls443LBAddress, tls443Listener)
	})

	turnCert, err := os.ReadFile(terndCert)
	if err != nil {
		t.Fatal(err)
	}
	upCert, err := os.ReadFile(webCert)
	if err != nil {
		t.Fatal(err)
	}
	for _, server := range servers {
		for _, c := range []struct {
			name string
			sni  string
			alpn []string
		}{
			{"ALPN", tls443WebName, []string{"stun.turn"}},
			{"SNI", tls443TURNName, nil},
		} {
			step("TURN/"+c.name+"/"+server, func(t *testing.T) {
				cfg := &tls.Config{ServerName: c.sni, NextProtos: c.alpn, InsecureSkipVerify: true} //nolint:gosec // compared with the Secret's certificate below
				first := time.Now()
				testenv.Eventually(t, 60*time.Second, func() error {
					a, err := allocateTLS(server, cfg, turnCert)
					if err != nil {
						return err
					}
					defer a.Close()
					return echoVia(a.relay, echo.ip, 2*time.Second)
				})
				a, err := allocateTLS(server, cfg, turnCert)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				sent, got, err := relayOn(a, echo.ip, 1, runPackets)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("TURN-TLS through %s (SNI %q, ALPN %v): ternd's certificate; first echo %.2fs after it was tried; %d sent, %d echoed",
					server, c.sni, c.alpn, time.Since(first).Seconds(), sent, got)
				if sent != runPackets || got != sent {
					t.Errorf("TURN-TLS through %s: sent %d of %d, echoed %d: want no loss", server, sent, runPackets, got)
				}
			})
		}
		for _, proto := range []string{"h2", "http/1.1"} {
			step("HTTPS/"+proto+"/"+server, func(t *testing.T) {
				want := map[string]string{"h2": "HTTP/2.0", "http/1.1": "HTTP/1.1"}[proto]
				body, gotProto, err := httpsGet(server, proto, upCert)
				if err != nil {
					t.Fatal(err)
				}
				if gotProto != want || body != "hello from the upstream over "+want+" for "+tls443WebName+"\n" {
					t.Fatalf("GET https://%s/ (SNI %s, ALPN %s): %s %q, want %s and the upstream's page", server, tls443WebName, proto, gotProto, body, want)
				}
				t.Logf("HTTPS through %s (SNI %s, ALPN %s): the upstream's own certificate, %s, %q", server, tls443WebName, proto, gotProto, body)
			})
		}
	}
	// A ClientHello that stalls after its first bytes, and one cut short: ternd closes each
	// (within clientHelloTimeout, 5 s by default; asserted within a generous bound), and the
	// upstream never sees a connection for them.
	step("BadClientHello", func(t *testing.T) {
		upMu.Lock()
		before := upstreamConns
		upMu.Unlock()
		hello := clientHello(t)
		for _, c := range []struct {
			name string
			send []byte
			eof  bool
		}{
			{"slow", hello[:3], false},
			{"truncated", hello[:len(hello)/2], true},
		} {
			conn, err := net.DialTimeout("tcp4", servers[0], 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := conn.Write(c.send); err != nil {
				t.Fatal(err)
			}
			if c.eof {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			n, err := conn.Read(make([]byte, 64))
			conn.Close()
			var ne net.Error
			if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("%s ClientHello through %s: read %d bytes, %v: want the connection closed by ternd", c.name, servers[0], n, err)
			}
			t.Logf("%s ClientHello (%d of %d bytes) through %s: closed by ternd after %.1fs", c.name, len(c.send), len(hello), servers[0], time.Since(start).Seconds())
		}
		upMu.Lock()
		defer upMu.Unlock()
		if upstreamConns != before {
			t.Errorf("the upstream accepted %d connections during the bad ClientHellos, want none", upstreamConns-before)
		}
	})

	// Every request reached the upstream from the ternd pod: spliced by ternd, whichever
	// Service address the client used. A pod on hostNetwork (as TestTURNRelay leaves the
	// Dataplane) reaches the upstream pod from an address of its node (the pods' bridge).
	from := []string{ternd.ip}
	if ternd.ip == ternd.hostIP {
		addrs, err := netnsAddrs(nodeNetns(dir, ternd.node))
		if err != nil {
			t.Fatal(err)
		}
		from = addrs
	}
	upMu.Lock()
	t.Logf("the upstream served %d requests, from %v (ternd pod %s, its addresses %v)", len(upstreamFrom), upstreamFrom, ternd, from)
	if len(upstreamFrom) != 2*len(servers) {
		t.Errorf("the upstream served %d requests, want %d (h2 and http/1.1 through each of %v)", len(upstreamFrom), 2*len(servers), servers)
	}
	for _, f := range upstreamFrom {
		if host, _, _ := net.SplitHostPort(f); !slices.Contains(from, host) {
			t.Errorf("the upstream served a request from %s, want it from the ternd pod %s (%v)", f, ternd, from)
		}
	}
	upMu.Unlock()
	t.Logf("TestTLS443 done %.1fs after it began", time.Since(start).Seconds())
}

// clientHello returns the ClientHello an HTTPS client (crypto/tls, SNI www.example.com, ALPN
// h2) sends.
func clientHello(t *testing.T) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		_ = tls.Client(c, &tls.Config{ServerName: tls443WebName, NextProtos: []string{"h2"}}).Handshake()
		c.Close()
	}()
	b := make([]byte, 4096)
	n, err := s.Read(b) // crypto/tls writes its ClientHello in one Write
	if err != nil || n < 100 || b[0] != 0x16 {
		t.Fatalf("no ClientHello: %d bytes, %v", n, err)
	}
	return b[:n]
}

// tls443Servers returns the Gateway's Service addresses for port 443: its ClusterIP and, when
// it has one, the node port on the first node's address.
func tls443Servers(t *testing.T) []string {
	t.Helper()
	var out string
	testenv.Eventually(t, 60*time.Second, func() error {
		var err error
		out, err = tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "service", tls443Gateway, "-o",
			`jsonpath={.spec.type} {.spec.clusterIP} {.spec.ports[?(@.port==443)].nodePort} {.spec.ports[?(@.port==443)].targetPort}`)
		if err != nil || len(strings.Fields(out)) < 3 {
			return fmt.Errorf("Service %s/%s: %q (%v)", gatewayNamespace, tls443Gateway, out, err)
		}
		return nil
	})
	f := strings.Fields(out)
	if f[len(f)-1] != strconv.Itoa(tls443TargetPort) {
		t.Errorf("Service %s/%s: port 443's targetPort %s, want %d (stunner.l7mp.io/targetport)", gatewayNamespace, tls443Gateway, f[len(f)-1], tls443TargetPort)
	}
	servers := []string{net.JoinHostPort(f[1], strconv.Itoa(tls443Port))}
	if len(f) == 4 && f[2] != "0" {
		servers = append(servers, net.JoinHostPort(firstNode(t).ip, f[2]))
	}
	t.Logf("Service %s/%s: %s", gatewayNamespace, tls443Gateway, out)
	return servers
}

// tls443Status checks the Gateway's status: Accepted, Programmed with status programmed and
// reason reason, and its listener Accepted, ResolvedRefs and Programmed with one route
// attached.
func tls443Status(programmed, reason string) error {
	for _, c := range []struct{ path, want string }{
		{`{.status.conditions[?(@.type=="Accepted")].status}`, "True"},
		{`{.status.conditions[?(@.type=="Programmed")].status}`, programmed},
		{`{.status.conditions[?(@.type=="Programmed")].reason}`, reason},
		{`{.status.listeners[?(@.name=="` + tls443Listener + `")].conditions[?(@.type=="Accepted")].status}`, "True"},
		{`{.status.listeners[?(@.name=="` + tls443Listener + `")].conditions[?(@.type=="ResolvedRefs")].status}`, "True"},
		{`{.status.listeners[?(@.name=="` + tls443Listener + `")].conditions[?(@.type=="Programmed")].status}`, "True"},
		{`{.status.listeners[?(@.name=="` + tls443Listener + `")].attachedRoutes}`, "1"},
	} {
		got, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "gateway", tls443Gateway, "-o", "jsonpath="+c.path)
		if err != nil || got != c.want {
			all, _ := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "gateway", tls443Gateway, "-o", "jsonpath={.status}")
			return fmt.Errorf("Gateway %s: %s = %q (%v), want %s; status %s", tls443Gateway, c.path, got, err, c.want, all)
		}
	}
	return nil
}

// allocateTLS dials server over TLS with cfg, wants the server's certificate to be the PEM
// certificate want (ternd's, not the upstream's), and makes a pion/turn client with a UDP
// allocation over that connection.
func allocateTLS(server string, cfg *tls.Config, want []byte) (*turnAlloc, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	tc, err := tls.DialWithDialer(d, "tcp4", server, cfg)
	if err != nil {
		return nil, fmt.Errorf("TLS to %s: %w", server, err)
	}
	if err := sameCert(tc.ConnectionState(), want); err != nil {
		tc.Close()
		return nil, fmt.Errorf("TLS to %s (SNI %q, ALPN %v): %w", server, cfg.ServerName, cfg.NextProtos, err)
	}
	conn := turn.NewSTUNConn(tc)
	c, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: server,
		TURNServerAddr: server,
		Username:       turnUser,
		Password:       turnPass,
		Realm:          turnRealm,
		Conn:           conn,
		LoggerFactory:  &logging.DefaultLoggerFactory{DefaultLogLevel: logging.LogLevelError},
		RTO:            500 * time.Millisecond,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.Listen(); err != nil {
		c.Close()
		conn.Close()
		return nil, err
	}
	relay, err := c.Allocate()
	if err != nil {
		c.Close()
		conn.Close()
		return nil, fmt.Errorf("allocate over TLS on %s: %w", server, err)
	}
	return &turnAlloc{client: c, conn: conn, relay: relay}, nil
}

// sameCert reports an error unless the leaf certificate of st is the PEM certificate want.
func sameCert(st tls.ConnectionState, want []byte) error {
	block, _ := pem.Decode(want)
	if block == nil {
		return fmt.Errorf("no PEM certificate to compare with")
	}
	if len(st.PeerCertificates) == 0 {
		return fmt.Errorf("no peer certificate")
	}
	if leaf := st.PeerCertificates[0]; !bytes.Equal(leaf.Raw, block.Bytes) {
		return fmt.Errorf("got the certificate of %q, not the one expected", leaf.Subject.CommonName)
	}
	return nil
}

// httpsGet GETs https://server/ with the SNI tls443WebName and ALPN proto (h2 or http/1.1),
// wants the server's certificate to be the PEM certificate want, and returns the body and the
// response's protocol. It retries for a while (the path through kube-proxy's rules).
func httpsGet(server, proto string, want []byte) (string, string, error) {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{ServerName: tls443WebName, NextProtos: []string{proto}, InsecureSkipVerify: true}, //nolint:gosec // compared below
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
	}
	if proto == "h2" {
		tr.ForceAttemptHTTP2 = true
	} else {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var body, gotProto string
	var last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		resp, err := client.Get("https://" + server + "/")
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		if resp.TLS == nil {
			return "", "", fmt.Errorf("no TLS state")
		}
		if err := sameCert(*resp.TLS, want); err != nil {
			return "", "", fmt.Errorf("GET https://%s/ (ALPN %s): %w", server, proto, err)
		}
		body, gotProto = string(b), resp.Proto
		return body, gotProto, nil
	}
	return "", "", fmt.Errorf("GET https://%s/ (ALPN %s): %w", server, proto, last)
}

// listenTCPIn opens a TCP listener on addr in the network namespace bound to nsPath (a pod
// sandbox's /proc/PID/ns/net), as listenUDPIn does for UDP.
func listenTCPIn(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	var lerr error
	if err := inNetns(nsPath, func() {
		ln, lerr = (&net.ListenConfig{}).Listen(context.Background(), "tcp4", addr)
	}); err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	return ln, lerr
}

// netnsAddrs returns the IP addresses of the interfaces of the network namespace bound to
// nsPath (a node's).
func netnsAddrs(nsPath string) ([]string, error) {
	var addrs []net.Addr
	var aerr error
	if err := inNetns(nsPath, func() { addrs, aerr = net.InterfaceAddrs() }); err != nil {
		return nil, err
	}
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP.String())
		}
	}
	return out, aerr
}

// inNetns runs f with the calling goroutine's thread in the network namespace bound to
// nsPath; the thread is thrown away (never unlocked) should switching back fail.
func inNetns(nsPath string, f func()) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", nsPath, err)
	}
	f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns back from %s: %w", nsPath, err) // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return nil
}
