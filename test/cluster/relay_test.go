//go:build cluster

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/internal/testenv"
)

// The TURN side of deploy/examples/stunner-reference-udp-gateway.yaml (STUNner's reference UDP
// Gateway) and testdata/gateway-prereqs.yaml.
const (
	turnUser, turnPass, turnRealm = "user-1", "pass-1", "stunner.l7mp.io"
	gatewaySelector               = "stunner.l7mp.io/related-gateway-name=udp-gateway"
	echoPort                      = 9001
)

// TestTURNRelay is issue 10's end-to-end test on the real node: the operator renders ternd
// for STUNner's reference UDP Gateway; TURN clients in the node's network namespace relay
// through the ternd pod to an echo in a media-server pod behind the UDPRoute (coturn's
// turnutils_peer run in the pod's network namespace), and not to a pod no route names; a new
// media-server pod is reachable soon after its EndpointSlice lists it; the Dataplane switched
// to hostNetwork relays through the node address; deleting the Gateway removes its objects.
func TestTURNRelay(t *testing.T) {
	dir := cluster(t)
	installOperator(t)
	root := repoRoot(t)
	uclient, err := exec.LookPath("turnutils_uclient")
	testenv.Require(t, "turnutils_uclient (hack/test-deps.sh installs coturn)", err)
	_, err = exec.LookPath("turnutils_peer")
	testenv.Require(t, "turnutils_peer (hack/test-deps.sh installs coturn)", err)

	kubectl(t, "apply", "-f", filepath.Join(root, "test", "cluster", "testdata", "gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", filepath.Join(root, "test", "cluster", "testdata", "media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "deployment/bystander", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	bystander := runningPods(t, "media-plane", "app=bystander")[0]
	startPeer(t, dir, echo)
	startPeer(t, dir, bystander)

	// 1. The Gateway: time from kubectl apply to the first packet relayed to the echo.
	start := time.Now()
	kubectl(t, "apply", "-f", filepath.Join(root, "deploy", "examples", "stunner-reference-udp-gateway.yaml"))
	var server string
	testenv.Eventually(t, 120*time.Second, func() error {
		pods, err := readyPods("stunner", gatewaySelector)
		if err != nil || len(pods) == 0 {
			return fmt.Errorf("no Ready ternd pod for the Gateway (%v)", err)
		}
		server = net.JoinHostPort(pods[0].ip, "3478")
		c, relay, err := allocate(server)
		if err != nil {
			return err
		}
		defer c.Close()
		defer relay.Close()
		return echoVia(relay, echo.ip, 500*time.Millisecond)
	})
	t.Logf("first packet relayed to the echo pod %.2fs after kubectl apply of the Gateway (ternd at %s)", time.Since(start).Seconds(), server)

	// 2. turnutils_uclient: 10 clients x 100 packets, no loss; a pod no route names: refused.
	checkUclient(t, uclient, server, echo.ip)
	c, relay, err := allocate(server)
	if err != nil {
		t.Fatal(err)
	}
	if err := echoVia(relay, bystander.ip, time.Second); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("relay to the bystander pod %s (no route): %v, want a 403", bystander.ip, err)
	}

	// 3. Scale the media servers: the new pod is reachable within 1 s of its EndpointSlice
	// listing it (or of its echo starting, when that came later).
	old := map[string]bool{echo.ip: true}
	kubectl(t, "-n", "media-plane", "scale", "deployment/media-server", "--replicas=2")
	var added pod
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, p := range runningPodsNow("media-plane", "app=media-server") {
			if !old[p.ip] {
				added = p
				return nil
			}
		}
		return errors.New("no new media-server pod yet")
	})
	listed := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			out, _ := tryRun(nil, "kubectl", "-n", "media-plane", "get", "endpointslices", "-l", "kubernetes.io/service-name=media-server-pool",
				"-o", `jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]} {end}`)
			if containsField(out, added.ip) {
				listed <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(listed)
	}()
	startPeer(t, dir, added)
	peerUp := time.Now()
	var reached time.Time
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := echoVia(relay, added.ip, 100*time.Millisecond); err != nil {
			return err
		}
		reached = time.Now()
		return nil
	})
	tListed, ok := <-listed
	if !ok {
		t.Fatalf("the EndpointSlice of media-server-pool never listed %s as ready", added.ip)
	}
	base := tListed
	if peerUp.After(base) {
		base = peerUp
	}
	lag := reached.Sub(base)
	t.Logf("new media-server pod %s reachable through ternd %v after it was listed ready and echoing (listed %v, echo up %v)",
		added.ip, lag.Round(time.Millisecond), tListed.Format("15:04:05.000"), peerUp.Format("15:04:05.000"))
	if lag > time.Second {
		t.Errorf("new media-server pod reachable %v after its EndpointSlice change, want within 1s", lag)
	}
	relay.Close()
	c.Close()

	// 4. The Dataplane on hostNetwork: ternd on the node's address, relaying again.
	kubectl(t, "patch", "dataplane", "default", "--type=merge", "-p", `{"spec":{"hostNetwork":true}}`)
	testenv.Eventually(t, 120*time.Second, func() error {
		pods, err := readyPods("stunner", gatewaySelector)
		if err != nil || len(pods) != 1 || pods[0].ip != nodeIP {
			return fmt.Errorf("want one Ready ternd pod on the node's address %s, have %v (%v)", nodeIP, pods, err)
		}
		return nil
	})
	server = net.JoinHostPort(nodeIP, "3478")
	testenv.Eventually(t, 30*time.Second, func() error {
		c, relay, err := allocate(server)
		if err != nil {
			return err
		}
		defer c.Close()
		defer relay.Close()
		return echoVia(relay, echo.ip, 500*time.Millisecond)
	})
	checkUclient(t, uclient, server, echo.ip)

	// 5. Deleting the Gateway removes its Deployment and Service at once; its pod terminates
	// but, as ternd drains on SIGTERM, stays until its last allocation is gone
	// (turnutils_uclient does not release its allocations; they expire after 600 s).
	kubectl(t, "-n", "stunner", "delete", "gateway", "udp-gateway")
	testenv.Eventually(t, 30*time.Second, func() error {
		out, err := tryRun(nil, "kubectl", "-n", "stunner", "get", "deployments,services", "-l", gatewaySelector, "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			return fmt.Errorf("left after deleting the Gateway: %q (%v)", out, err)
		}
		out, err = tryRun(nil, "kubectl", "-n", "stunner", "get", "pods", "-l", gatewaySelector,
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 1 {
				return fmt.Errorf("ternd pod %s not terminating after deleting the Gateway", f[0])
			}
		}
		return nil
	})
	// TODO(issue 10): config propagation p50/p99 and the time to the first relayed packet into
	// BENCHMARKS.md; the pion client's own relay run (beside turnutils_uclient) with loss counts.
}

type pod struct{ namespace, name, ip string }

func (p pod) String() string { return p.namespace + "/" + p.name + "@" + p.ip }

// runningPods lists the Running, not deleted pods matching selector, failing t when there are
// none.
func runningPods(t *testing.T, namespace, selector string) []pod {
	t.Helper()
	pods := runningPodsNow(namespace, selector)
	if len(pods) == 0 {
		t.Fatalf("no running pod %s in %s:\n%s", selector, namespace, kubectl(t, "-n", namespace, "get", "pods", "-o", "wide"))
	}
	return pods
}

func runningPodsNow(namespace, selector string) []pod {
	out, _ := tryRun(nil, "kubectl", "-n", namespace, "get", "pods", "-l", selector, "--field-selector=status.phase=Running",
		"-o", `jsonpath={range .items[?(@.status.podIP)]}{.metadata.name} {.status.podIP} {.metadata.deletionTimestamp}{"\n"}{end}`)
	var pods []pod
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			pods = append(pods, pod{namespace, f[0], f[1]})
		}
	}
	return pods
}

// readyPods lists the Ready, not deleted pods matching selector.
func readyPods(namespace, selector string) ([]pod, error) {
	out, err := tryRun(nil, "kubectl", "-n", namespace, "get", "pods", "-l", selector,
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	var pods []pod
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "True" {
			pods = append(pods, pod{namespace, f[0], f[1]})
		}
	}
	return pods, nil
}

func containsField(s, field string) bool {
	for _, f := range strings.Fields(s) {
		if f == field {
			return true
		}
	}
	return false
}

// startPeer runs coturn's turnutils_peer (a UDP echo) on p's address, port 9001, inside p's
// network namespace, and waits until it echoes.
func startPeer(t *testing.T, dir string, p pod) {
	t.Helper()
	pid := sandboxPID(t, dir, p.name)
	cmd := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "--",
		"turnutils_peer", "-L", p.ip, "-p", strconv.Itoa(echoPort))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		conn, err := net.Dial("udp4", net.JoinHostPort(p.ip, strconv.Itoa(echoPort)))
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != "ping" {
			return fmt.Errorf("turnutils_peer in %v does not echo (%v): %s", p, err, out.String())
		}
		return nil
	})
}

// allocate makes a pion/turn client with a UDP allocation on server.
func allocate(server string) (*turn.Client, net.PacketConn, error) {
	conn, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		return nil, nil, err
	}
	c, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: server,
		TURNServerAddr: server,
		Username:       turnUser,
		Password:       turnPass,
		Realm:          turnRealm,
		Conn:           conn,
		LoggerFactory:  &logging.DefaultLoggerFactory{DefaultLogLevel: logging.LogLevelError},
		RTO:            200 * time.Millisecond,
	})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	if err := c.Listen(); err != nil {
		c.Close()
		return nil, nil, err
	}
	relay, err := c.Allocate()
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("allocate on %s: %w", server, err)
	}
	return c, relay, nil
}

// echoVia sends a datagram through relay to the echo on ip:9001 and waits for it to come back.
func echoVia(relay net.PacketConn, ip string, timeout time.Duration) error {
	peer := &net.UDPAddr{IP: net.ParseIP(ip), Port: echoPort}
	msg := []byte("tern-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	if _, err := relay.WriteTo(msg, peer); err != nil {
		return fmt.Errorf("relay to %v: %w", peer, err)
	}
	buf := make([]byte, 1500)
	deadline := time.Now().Add(timeout)
	for {
		_ = relay.SetReadDeadline(deadline)
		n, from, err := relay.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo from %v through the relay: %w", peer, err)
		}
		if from.String() == peer.String() && bytes.Equal(buf[:n], msg) {
			return nil
		}
	}
}

var (
	uclientTotals = regexp.MustCompile(`start_mclient: tot_send_msgs=(\d+), tot_recv_msgs=(\d+)`)
	uclientLoss   = regexp.MustCompile(`Total lost packets (\d+) \(`)
)

// checkUclient relays 10 clients x 100 packets with turnutils_uclient through server to the
// echo on echoIP and wants every packet back.
func checkUclient(t *testing.T, uclient, server, echoIP string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(server)
	out, err := tryRun(nil, uclient, "-u", turnUser, "-w", turnPass, "-p", port,
		"-e", echoIP, "-r", strconv.Itoa(echoPort), "-m", "10", "-n", "100", "-c", host)
	if err != nil {
		t.Fatalf("turnutils_uclient: %v", err)
	}
	tot, loss := uclientTotals.FindAllStringSubmatch(out, -1), uclientLoss.FindAllStringSubmatch(out, -1)
	if len(tot) == 0 || len(loss) == 0 {
		t.Fatalf("turnutils_uclient via %s printed no report:\n%s", server, out)
	}
	sent, recv, lost := tot[len(tot)-1][1], tot[len(tot)-1][2], loss[len(loss)-1][1]
	t.Logf("turnutils_uclient via %s to %s: sent %s, received %s, lost %s", server, echoIP, sent, recv, lost)
	if lost != "0" || sent != recv || sent == "0" {
		t.Errorf("turnutils_uclient via %s: sent %s, received %s, lost %s; want no loss:\n%s", server, sent, recv, lost, out)
	}
}
