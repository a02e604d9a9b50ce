package e2e

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v3"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestHalfSentFrames floods ternd's TURN-TCP listener with connections
// that each send the header and most of the body of a 65,000-byte STUN
// message and then nothing, as an attacker without credentials would
// (issue 22, item 3). It checks that ternd's peak resident memory stays
// within 1.5 times the frame-buffer budget (64 MiB: freed buffers wait
// for the collector) plus 24 KiB per connection, that
// a client with credentials relays over TCP meanwhile, and that every
// flooding connection is closed for its frame (the budget, or the 5 s
// partial-frame limit) rather than held for the idle limit.
// TERN_SOAK_CONNS sets the number of connections (default 4,000, which
// took 64 KiB each before the budget) and
// TERN_FRAME_SENT the bytes of each frame sent (default 60,000);
// docs/security.md has the figures of a 10,000-connection run.
func TestHalfSentFrames(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's frame limits")
	}
	n := envInt(t, "TERN_SOAK_CONNS", 4000)
	if n > 250*400 {
		t.Fatalf("TERN_SOAK_CONNS=%d: at most %d from 127.0.0.2-251", n, 250*400)
	}
	sent := envInt(t, "TERN_FRAME_SENT", 60000)
	if sent < 24 || sent >= 65000 {
		t.Fatalf("TERN_FRAME_SENT=%d: want 24 to 64,999 bytes of a 65,000-byte frame", sent)
	}
	const perAddr = 400 // under the default limits.connectionsPerIP
	tcpPort, release := freePort(t, "tcp4")
	release()
	s := startTernd(t, func(c *config) {
		c.Admin.LogLevel = "info"
		c.Listeners = append(c.Listeners, listener{Name: "tcp", Protocol: "TURN-TCP", Address: "127.0.0.1", Port: tcpPort, Routes: []string{"local"}})
		c.Limits.MaxConnections = n + 1 // room for the client with credentials
	})
	addr := "127.0.0.1:" + strconv.Itoa(tcpPort)
	legit := relayOverTCP(t, addr)
	before := procStatusKB(t, s.cmd.Process.Pid, "VmRSS")

	start := time.Now()
	// The peak is read once the flood is over, whatever ends it: VmHWM
	// holds the highest RSS since ternd started.
	defer func() {
		peak := procStatusKB(t, s.cmd.Process.Pid, "VmHWM")
		t.Logf("ternd RSS %d KB before the flood, peak %d KB: %.0f bytes per connection",
			before, peak, float64(peak-before)*1024/float64(n))
		if bound := 96<<10 + n*24; peak-before > bound {
			t.Errorf("ternd RSS grew by %d KB, want at most %d KB (1.5 times the 64 MiB frame-buffer budget and 24 KiB per connection)", peak-before, bound)
		}
	}()
	conns := halfFrames(t, addr, n, perAddr, sent)
	t.Logf("%d TCP connections each sent %d bytes of a 65,000-byte frame in %v", n, sent, time.Since(start).Round(time.Millisecond))
	legit.check(t)
	s.waitMetric(t, `tern_listener_connections_closed_total{name="tcp",reason="frame"}`, float64(n), 30*time.Second)
	t.Logf("all %d closed for their frame %v after the first was opened; ternd RSS %d KB",
		n, time.Since(start).Round(100*time.Millisecond), procStatusKB(t, s.cmd.Process.Pid, "VmRSS"))
	legit.check(t)
	for _, c := range conns {
		c.Close()
	}
}

// halfFrames opens n TCP connections to addr, perAddr from each loopback
// source address from 127.0.0.2 on, and writes on each the first sent
// bytes of a 65,000-byte Binding request. The connections close when the
// test ends.
func halfFrames(t *testing.T, addr string, n, perAddr, sent int) []net.Conn {
	t.Helper()
	msg := make([]byte, 65000)
	copy(msg, stun.MustBuild(stun.TransactionID, stun.BindingRequest).Raw[:20])
	binary.BigEndian.PutUint16(msg[2:4], uint16(len(msg)-20))
	binary.BigEndian.PutUint16(msg[20:22], 0x8fff) // unknown, comprehension-optional
	binary.BigEndian.PutUint16(msg[22:24], uint16(len(msg)-24))
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				src := net.IPv4(127, 0, 0, byte(2+i/perAddr))
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp4", addr)
				if err == nil {
					_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
					_, err = c.Write(msg[:sent])
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d from %v: %w", i, src, err)
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return conns
}

// procStatusKB is field (VmRSS, VmHWM) of process pid's status, KB.
func procStatusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	var kb int
	testenv.Eventually(t, time.Second, func() error {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
				kb, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return err
			}
		}
		return fmt.Errorf("no %s in /proc/%d/status", field, pid)
	})
	return kb
}
