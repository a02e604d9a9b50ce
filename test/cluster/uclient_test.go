//go:build cluster

package cluster

import (
	"errors"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	uclientTotals = regexp.MustCompile(`start_mclient: tot_send_msgs=(\d+), tot_recv_msgs=(\d+)`)
	uclientLoss   = regexp.MustCompile(`Total lost packets (\d+) \(`)
)

// uclientRun is one turnutils_uclient run's report.
type uclientRun struct {
	server           string
	sent, recv, lost string
	took             time.Duration
	err              error
	out              string
}

// runUclient relays 10 clients x 100 packets with turnutils_uclient through server to the echo
// on echoIP. turnutils_uclient does not release its allocations when it ends: they stay on
// the ternd pod until they expire (600 s), which keeps a terminating pod draining until its
// grace period ends. It is safe to call from several goroutines.
func runUclient(uclient, server, echoIP string) uclientRun {
	return runUclientWith([]string{uclient}, server, echoIP)
}

// runUclientWith is runUclient with the command line cmd (turnutils_uclient, or a command that
// runs it, such as nsenter) before turnutils_uclient's arguments.
func runUclientWith(cmd []string, server, echoIP string) uclientRun {
	host, port, _ := net.SplitHostPort(server)
	r := uclientRun{server: server}
	start := time.Now()
	args := append(cmd[1:len(cmd):len(cmd)], "-u", turnUser, "-w", turnPass, "-p", port,
		"-e", echoIP, "-r", strconv.Itoa(echoPort), "-m", "10", "-n", "100", "-c", host)
	r.out, r.err = tryRun(nil, cmd[0], args...)
	if r.err != nil && strings.Contains(r.out, "channel bind: error 400") {
		// Each client binds a random channel number to the peer's port+1, then a second
		// random one to the peer; when the two draws are equal (1 in 16,384 per client) RFC
		// 8656 §12 requires the 400 it gets, and it exits: the tool, not the server. Once.
		start = time.Now()
		r.out, r.err = tryRun(nil, cmd[0], args...)
	}
	r.took = time.Since(start)
	tot, loss := uclientTotals.FindAllStringSubmatch(r.out, -1), uclientLoss.FindAllStringSubmatch(r.out, -1)
	if r.err == nil && (len(tot) == 0 || len(loss) == 0) {
		r.err = errors.New("turnutils_uclient printed no report")
	}
	if r.err == nil {
		r.sent, r.recv, r.lost = tot[len(tot)-1][1], tot[len(tot)-1][2], loss[len(loss)-1][1]
	}
	return r
}

// checkUclient runs turnutils_uclient through every server at once (runUclient; it spends
// most of a run waiting, so the runs overlap) to the echo on echoIP, and wants every packet
// back from each.
func checkUclient(t *testing.T, uclient, echoIP string, servers ...string) {
	t.Helper()
	runs := make([]uclientRun, len(servers))
	var wg sync.WaitGroup
	for i, server := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = runUclient(uclient, server, echoIP)
		}()
	}
	wg.Wait()
	for _, r := range runs {
		if r.err != nil {
			t.Errorf("turnutils_uclient via %s: %v\n%s", r.server, r.err, r.out)
			continue
		}
		t.Logf("turnutils_uclient via %s to %s: sent %s, received %s, lost %s (%.1fs)", r.server, echoIP, r.sent, r.recv, r.lost, r.took.Seconds())
		if r.lost != "0" || r.sent != r.recv || r.sent == "0" {
			t.Errorf("turnutils_uclient via %s: sent %s, received %s, lost %s; want no loss:\n%s", r.server, r.sent, r.recv, r.lost, r.out)
		}
	}
}

// checkPionRun is checkUclient's pion/turn counterpart (relayRun): runClients x runPackets
// through server to the echo on echoIP, every one echoed; the allocations are released.
func checkPionRun(t *testing.T, server, echoIP string) {
	t.Helper()
	start := time.Now()
	res, err := relayRun(server, echoIP, runClients, runPackets)
	t.Logf("pion/turn via %s to %s: %v (%.1fs)", server, echoIP, res, time.Since(start).Seconds())
	if err != nil {
		t.Fatalf("pion/turn relay run via %s: %v (%v)", server, err, res)
	}
	if res.sent != runClients*runPackets || res.lost() != 0 {
		t.Errorf("pion/turn relay run via %s: %v; want %d sent and none lost", server, res, runClients*runPackets)
	}
}
