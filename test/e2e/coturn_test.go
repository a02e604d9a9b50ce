package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// requireTool returns the path of one of coturn's tools, or skips the test (fails it under CI,
// where `make test` installs coturn) as testenv.Require does.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	testenv.Require(t, name+" (hack/test-deps.sh installs coturn)", err)
	return path
}

// startTurnutilsPeer starts coturn's UDP echo peer on 127.0.0.1 and returns
// its port. turnutils_peer listens on the port and the next one (where
// turnutils_uclient sends its RTCP stream), so both must be free.
func startTurnutilsPeer(t *testing.T) int {
	t.Helper()
	return startTurnutilsPeerOn(t, "127.0.0.1")
}

// startTurnutilsPeerOn is startTurnutilsPeer on ip (127.0.0.1 or ::1).
func startTurnutilsPeerOn(t *testing.T, ip string) int {
	t.Helper()
	bin := requireTool(t, "turnutils_peer")
	network := "udp4"
	if strings.Contains(ip, ":") {
		network = "udp6"
	}
	for range 10 {
		port, release := freePort(t, "udp4")
		next, err := net.ListenPacket(network, net.JoinHostPort(ip, strconv.Itoa(port+1)))
		release()
		if err != nil {
			continue
		}
		next.Close()

		out := &testenv.LockedBuffer{}
		cmd := exec.Command(bin, "-L", ip, "-p", strconv.Itoa(port))
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(stopTimeout):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if err := waitEchoOn(ip, port, done); err != nil {
			stop()
			t.Logf("turnutils_peer on port %d: %v\n%s", port, err, out.String())
			continue // lost a race for the port; try another
		}
		t.Cleanup(func() {
			stop()
			if t.Failed() {
				t.Logf("turnutils_peer output:\n%s", out.String())
			}
		})
		return port
	}
	t.Fatal("could not start turnutils_peer")
	return 0
}

// waitEchoOn waits until a UDP echo server answers on ip:port.
func waitEchoOn(ip string, port int, exited <-chan struct{}) error {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		return err
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.ParseIP(ip), Port: port}
	buf := make([]byte, 64)
	for range 50 {
		select {
		case <-exited:
			return errors.New("exited")
		default:
		}
		if _, err := c.WriteToUDP([]byte("ping"), to); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, _, err := c.ReadFromUDP(buf); err == nil && string(buf[:n]) == "ping" {
			return nil
		}
	}
	return errors.New("no echo within 5 s")
}

// uclientReport is the summary turnutils_uclient prints at the end, e.g.
//
//	7: : start_mclient: tot_send_msgs=500, tot_recv_msgs=500
//	7: : Total lost packets 0 (0.000000%), total send dropped 0 (0.000000%)
type uclientReport struct {
	sent, received, lost, sendDropped int
}

var (
	uclientTotals = regexp.MustCompile(`start_mclient: tot_send_msgs=(\d+), tot_recv_msgs=(\d+)`)
	uclientLoss   = regexp.MustCompile(`Total lost packets (\d+) \([0-9.]+%\), total send dropped (\d+)`)
)

func parseUclient(out string) (uclientReport, bool) {
	tot := uclientTotals.FindAllStringSubmatch(out, -1)
	loss := uclientLoss.FindAllStringSubmatch(out, -1)
	if len(tot) == 0 || len(loss) == 0 {
		return uclientReport{}, false
	}
	last, l := tot[len(tot)-1], loss[len(loss)-1]
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	return uclientReport{sent: atoi(last[1]), received: atoi(last[2]), lost: atoi(l[1]), sendDropped: atoi(l[2])}, true
}

// TestCoturnUclient relays turnutils_uclient's traffic through the server
// to turnutils_peer and back: 10 clients x 50 messages of 100 bytes at the
// tool's default pace (one message per 20 ms per client), so any loss is
// the server's fault. The flags are turnutils_uclient's, which are easy to
// misread: -c disables the second (RTCP) allocation of each client, it
// does not disable channels; -s sends with Send indications instead of
// channels; -g adds DONT-FRAGMENT; -r is the peer port, -p the server's.
func TestCoturnUclient(t *testing.T) {
	uclient := requireTool(t, "turnutils_uclient")
	const (
		clients  = 10
		messages = 50
		secret   = "e2e-shared-secret"
	)
	ephemeral := func(c *config) { c.Auth = auth{Type: "ephemeral", Realm: testRealm, SharedSecret: secret} }
	cert, key := writeTestCert(t, t.TempDir())
	var streamOn func(protocol, address string) func(*config)
	// stream adds a listener of protocol and makes it the one the client uses; relays stay UDP.
	stream := func(protocol string) func(*config) { return streamOn(protocol, "127.0.0.1") }
	streamOn = func(protocol, address string) func(*config) {
		return func(c *config) {
			network := "tcp4"
			if protocol == "TURN-DTLS" {
				network = "udp4"
			}
			port, release := freePort(t, network)
			release()
			l := listener{Name: "client", Protocol: protocol, Address: address, Port: port, Routes: []string{"local"}}
			if protocol != "TURN-TCP" {
				l.Cert, l.Key = cert, key
			}
			c.Listeners = append([]listener{l}, c.Listeners...)
		}
	}
	for _, tc := range []struct {
		name     string
		mutate   func(*config)
		flags    []string
		password string
		wantFail bool
		stream   bool   // the client speaks TCP, TLS or DTLS to a listener mutate adds
		reliable bool   // ... over TCP or TLS
		target   string // the address the client sends to, when not the listener's
	}{
		// -t is TURN over TCP; -S adds TLS to it, or makes UDP DTLS.
		{name: "TCP", mutate: stream("TURN-TCP"), flags: []string{"-c", "-t"}, stream: true, reliable: true},
		// "TCP" runs on ternd's default, plain TURN-TCP connections served
		// by epoll loops; this one with a reader goroutine each instead.
		{name: "TCP on reader goroutines", mutate: func(c *config) {
			stream("TURN-TCP")(c)
			c.args = append(c.args, "--tcp-event-loops=false")
		}, flags: []string{"-c", "-t"}, stream: true, reliable: true},
		{name: "TLS", mutate: stream("TURN-TLS"), flags: []string{"-c", "-t", "-S"}, stream: true, reliable: true},
		// "TLS" moves each connection to the epoll loops once its
		// handshake is done; this one keeps its reader goroutine.
		{name: "TLS on reader goroutines", mutate: func(c *config) {
			stream("TURN-TLS")(c)
			c.args = append(c.args, "--tcp-event-loops=false")
		}, flags: []string{"-c", "-t", "-S"}, stream: true, reliable: true},
		{name: "DTLS", mutate: stream("TURN-DTLS"), flags: []string{"-c", "-S"}, stream: true},
		{name: "channel", flags: []string{"-c"}},
		{name: "send indication", flags: []string{"-c", "-s"}},
		// Without -c each client also makes an RTCP allocation: EVEN-PORT
		// with the reserve bit, then RESERVATION-TOKEN for the odd port.
		{name: "RTP and RTCP pair", flags: nil},
		{name: "DONT-FRAGMENT", flags: []string{"-c", "-g"}},
		// -W makes TURN REST credentials from the shared secret.
		{name: "REST shared secret", mutate: ephemeral, flags: []string{"-c", "-W", secret}},
		{name: "wrong password", flags: []string{"-c"}, password: "wrong", wantFail: true},
		// uclient connect()s its socket to the server's address. A listener
		// on 0.0.0.0 that the client reaches at 127.0.0.2 must answer, and
		// relay the peer's data, from 127.0.0.2, not from the 127.0.0.1 the
		// route back to the client picks, or the client's kernel drops it
		// all (what a hostNetwork Gateway on a node with several addresses
		// meets). -s covers the Send indications the listener worker sends,
		// channels the relay workers' ChannelData.
		{name: "wildcard listener, channels", mutate: func(c *config) { c.Listeners[0].Address = "0.0.0.0" }, flags: []string{"-c"}, target: "127.0.0.2"},
		{name: "wildcard listener, send indications", mutate: func(c *config) { c.Listeners[0].Address = "0.0.0.0" }, flags: []string{"-c", "-s"}, target: "127.0.0.2"},
		{name: "wildcard listener, DTLS", mutate: streamOn("TURN-DTLS", "0.0.0.0"), flags: []string{"-c", "-S"}, stream: true, target: "127.0.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if targetIsCoturn() && (tc.stream || tc.target != "") {
				t.Skip("the coturn target is configured for TURN-UDP on 127.0.0.1 only")
			}
			// The default config: turnutils_uclient draws channel numbers
			// at random in RFC 5766's 0x4000-0x7FFF, which ternd accepts
			// unless limits.strictChannelNumbers is set.
			s := startTernd(t, func(c *config) {
				if tc.mutate != nil {
					tc.mutate(c)
				}
			})
			peerPort := startTurnutilsPeer(t)
			password := testPassword
			if tc.password != "" {
				password = tc.password
			}
			args := []string{
				"-p", strconv.Itoa(s.addr.Port), "-u", testUser, "-w", password,
				"-e", "127.0.0.1", "-r", strconv.Itoa(peerPort),
				"-m", strconv.Itoa(clients), "-n", strconv.Itoa(messages), "-l", "100",
			}
			target := s.addr.IP.String()
			if tc.target != "" {
				target = tc.target
			}
			args = append(append(args, tc.flags...), target)

			run := func() (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, uclient, args...)
				cmd.WaitDelay = 5 * time.Second
				outb, err := cmd.CombinedOutput()
				if ctx.Err() != nil {
					t.Fatalf("turnutils_uclient %s: still running after 60 s\n%s", strings.Join(args, " "), outb)
				}
				return string(outb), err
			}
			out, err := run()
			if err != nil && !tc.wantFail && strings.Contains(out, "channel bind: error 400") {
				// Each uclient client binds a random channel number to the peer's
				// port+1, then a second random one to the peer. When the two draws
				// are equal (1 in 16384 per client) RFC 8656 §12 requires the 400 it
				// got, and uclient exits: that is the tool, not the server. Once.
				t.Logf("turnutils_uclient drew one channel number twice (400 on ChannelBind); running it again\n%s", out)
				out, err = run()
			}
			if tc.wantFail {
				if err == nil || !strings.Contains(out, "Cannot complete Allocation") {
					t.Fatalf("turnutils_uclient %s: %v, want an allocation failure\n%s", strings.Join(args, " "), err, out)
				}
				return
			}
			rep, ok := parseUclient(out)
			if err != nil || !ok {
				t.Fatalf("turnutils_uclient %s: %v, report found: %v\n%s", strings.Join(args, " "), err, ok, out)
			}
			for _, line := range strings.Split(out, "\n") {
				if uclientTotals.MatchString(line) || uclientLoss.MatchString(line) {
					t.Log(strings.TrimSpace(line))
				}
			}
			if rep.sent == clients*messages && rep.received < rep.sent && rep.sendDropped == 0 && tc.reliable {
				// uclient counts echoes until it stops, shortly after its last send. On a
				// loaded machine its TLS clients start late (each cycles through TLS
				// versions first) and it stops while echoes are still on their way, a few
				// per client (seen: 11 of 500, 37 of 500). Over TCP and TLS the leg to the
				// client cannot lose what the server wrote, so the server's own counters
				// decide: every message relayed to the peer, every echo read back from it,
				// nothing dropped.
				if err := serverRelayedAll(t, s, rep.sent); err != nil {
					t.Errorf("turnutils_uclient received %d of %d, and the server did not relay them all: %v\n%s", rep.received, rep.sent, err, out)
				} else {
					t.Logf("turnutils_uclient stopped with %d of %d echoes unread; the server relayed all %d both ways and dropped none", rep.sent-rep.received, rep.sent, rep.sent)
				}
				return
			}
			if rep.sent != clients*messages || rep.received != rep.sent || rep.lost != 0 || rep.sendDropped != 0 {
				t.Errorf("sent %d, received %d, lost %d, send dropped %d; want %d sent and received, none lost\n%s",
					rep.sent, rep.received, rep.lost, rep.sendDropped, clients*messages, out)
			}
		})
	}
}

// serverRelayedAll checks s's counters after a turnutils_uclient run of n messages through an
// echoing peer: at least n datagrams sent to peers and n received from them, and no packet
// dropped for any reason (a relayed message given up for a slow TCP or TLS client is counted
// there too). It waits up to 5 s for the counters to settle.
func serverRelayedAll(t *testing.T, s *server, n int) error {
	t.Helper()
	var last error
	deadline := time.Now().Add(5 * time.Second)
	for {
		fams := s.scrapeFamilies(t)
		peer := map[string]float64{}
		if f := fams["tern_peer_packets_total"]; f != nil {
			peer = series(f)
		}
		var dropped float64
		if f := fams["tern_dropped_packets_total"]; f != nil {
			for _, v := range series(f) {
				dropped += v
			}
		}
		tx, rx := peer["direction=tx"], peer["direction=rx"]
		switch {
		case dropped != 0:
			return fmt.Errorf("tern_dropped_packets_total %v", dropped)
		case tx >= float64(n) && rx >= float64(n):
			return nil
		}
		last = fmt.Errorf("tern_peer_packets_total: tx %v, rx %v, want at least %d each", tx, rx, n)
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}
