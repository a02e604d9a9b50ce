package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// kubeletSwap writes a new certificate with common name cn into a
// timestamped directory under dir and points dir/..data at it by renaming
// a fresh symlink over it, which is how kubelet updates a Secret volume.
func kubeletSwap(t *testing.T, dir, cn string, gen int) {
	t.Helper()
	ts := fmt.Sprintf("..2026_11_24_%02d", gen)
	if _, _, err := selfsigned.Write(filepath.Join(dir, ts), cn, time.Hour); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func servedCommonName(addr string) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp4", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // self-signed test certificates
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestTLSCertificateReload serves TURN-TLS from a Secret-style directory,
// makes an allocation with the pion client over TLS and relays through it,
// rotates the certificate as kubelet does after cert-manager renews a
// Secret, and checks that new TLS connections get the new certificate
// within a few seconds while the allocation made before keeps relaying
// on its connection.
func TestTLSCertificateReload(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not reload certificates")
	}
	s, dir, tlsPort := startTLSReloadTernd(t, nil)
	addr := "127.0.0.1:" + strconv.Itoa(tlsPort)
	wantCN := func(want string) func() error {
		return func() error {
			cn, err := servedCommonName(addr)
			if err != nil {
				return err
			}
			if cn != want {
				return fmt.Errorf("%s serves %q, want %q", addr, cn, want)
			}
			return nil
		}
	}
	testenv.Eventually(t, 5*time.Second, wantCN("cert-a"))

	tc, err := tls.Dial("tcp4", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // self-signed test certificates
	if err != nil {
		t.Fatal(err)
	}
	log := &testenv.LockedBuffer{}
	client, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: addr, TURNServerAddr: addr, Username: testUser, Password: testPassword, Realm: testRealm,
		Conn: turn.NewSTUNConn(tc), LoggerFactory: &logging.DefaultLoggerFactory{Writer: log, DefaultLogLevel: logging.LogLevelWarn},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Listen(); err != nil {
		t.Fatal(err)
	}
	relayConn, err := client.Allocate()
	if err != nil {
		t.Fatalf("Allocate over TLS: %v", err)
	}
	defer relayConn.Close()
	p := startEchoPeer(t, "127.0.0.1:0")
	echoes := func(msg string) error {
		if _, err := relayConn.WriteTo([]byte(msg), p.addr); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		_ = relayConn.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			n, _, err := relayConn.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("no echo of %q: %w", msg, err)
			}
			if string(buf[:n]) == msg {
				return nil
			}
		}
	}
	if err := echoes("before the rotation"); err != nil {
		t.Fatal(err)
	}

	kubeletSwap(t, dir, "cert-b", 2)
	testenv.Eventually(t, 5*time.Second, wantCN("cert-b"))
	for i := range 5 {
		if err := echoes(fmt.Sprintf("after the rotation %d", i)); err != nil {
			t.Fatalf("allocation made before the rotation: %v\npion log:\n%s", err, log.String())
		}
	}
	s.waitMetric(t, "stunner_allocations_active", 1, 2*time.Second)
}

// TestTLSCertificateReloadUclient does the same with coturn's
// turnutils_uclient: two clients relay over TURN-TLS for a few seconds
// while the certificate rotates under the listener, and lose nothing: by
// uclient's count, or, when it stops with echoes unread, by the server's
// (serverRelayedAll).
func TestTLSCertificateReloadUclient(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not reload certificates")
	}
	uclient := requireTool(t, "turnutils_uclient")
	s, dir, tlsPort := startTLSReloadTernd(t, nil)
	peerPort := startTurnutilsPeer(t)
	const clients, messages = 2, 200 // 20 ms apart: about 4 s of relaying
	args := []string{"-t", "-S", "-c", "-p", strconv.Itoa(tlsPort), "-u", testUser, "-w", testPassword,
		"-e", "127.0.0.1", "-r", strconv.Itoa(peerPort), "-m", strconv.Itoa(clients), "-n", strconv.Itoa(messages),
		"-l", "100", "-z", "20", "127.0.0.1"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, uclient, args...)
	cmd.WaitDelay = 5 * time.Second
	out := &testenv.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	s.waitMetricAtLeast(t, "stunner_allocations_active", clients, 10*time.Second)

	kubeletSwap(t, dir, "cert-b", 2)
	testenv.Eventually(t, 5*time.Second, func() error {
		cn, err := servedCommonName("127.0.0.1:" + strconv.Itoa(tlsPort))
		if err == nil && cn != "cert-b" {
			err = fmt.Errorf("serves %q, want cert-b", cn)
		}
		return err
	})
	if err := <-done; err != nil {
		t.Fatalf("turnutils_uclient %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	rep, ok := parseUclient(out.String())
	if ok && rep.sent == clients*messages && rep.received < rep.sent && rep.sendDropped == 0 {
		// uclient stopped with echoes unread, as TestCoturnUclient sees it do on a
		// loaded machine (its TLS clients start late, cycling through TLS versions):
		// over TLS the leg to the client cannot lose what the server wrote, so the
		// server's own counters decide, across the rotation as anywhere.
		if err := serverRelayedAll(t, s, rep.sent); err != nil {
			t.Errorf("turnutils_uclient received %d of %d, and the server did not relay them all: %v\n%s", rep.received, rep.sent, err, out.String())
		} else {
			t.Logf("turnutils_uclient stopped with %d of %d echoes unread; the server relayed all %d both ways and dropped none", rep.sent-rep.received, rep.sent, rep.sent)
		}
		return
	}
	if !ok || rep.sent != clients*messages || rep.received != rep.sent || rep.lost != 0 {
		t.Errorf("report found %v: sent %d, received %d, lost %d; want %d sent and received across the rotation\n%s",
			ok, rep.sent, rep.received, rep.lost, clients*messages, out.String())
	}
}

// startTLSReloadTernd starts ternd with a TURN-TLS listener whose certificate and key are links
// into dir/..data, as kubelet mounts a Secret, holding "cert-a"; mutate, when not nil, changes
// the config further. It returns the server, dir and the TLS port.
func startTLSReloadTernd(t *testing.T, mutate func(*config)) (*server, string, int) {
	t.Helper()
	dir := t.TempDir()
	kubeletSwap(t, dir, "cert-a", 1)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	tlsPort, release := freePort(t, "tcp4")
	release()
	s := startTernd(t, func(c *config) {
		c.Listeners = append(c.Listeners, listener{Name: "tls", Protocol: "TURN-TLS", Address: "127.0.0.1", Port: tlsPort,
			Routes: []string{"local"}, Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")})
		if mutate != nil {
			mutate(c)
		}
	})
	return s, dir, tlsPort
}
