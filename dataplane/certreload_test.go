package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pion/dtls/v2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// servedCN dials a TLS listener and returns the common name of the
// certificate it presents.
func servedCN(addr string) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp4", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's self-signed certificates
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// servedDTLSCN does the same over DTLS.
func servedDTLSCN(addr string) (string, error) {
	raddr, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := dtls.DialWithContext(ctx, "udp4", raddr, &dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec // test certificates
	if err != nil {
		return "", err
	}
	defer c.Close()
	certs := c.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "", fmt.Errorf("no peer certificate")
	}
	cert, err := x509.ParseCertificate(certs[0])
	if err != nil {
		return "", err
	}
	return cert.Subject.CommonName, nil
}

func wantCN(served func(string) (string, error), addr, want string) func() error {
	return func() error {
		cn, err := served(addr)
		if err != nil {
			return err
		}
		if cn != want {
			return fmt.Errorf("%s serves %q, want %q", addr, cn, want)
		}
		return nil
	}
}

// kubeletSecretDir lays out dir as kubelet does a Secret volume: the
// files are symlinks through ..data, a symlink to a timestamped directory
// that holds the pair. It returns the paths a listener names and a
// function that rotates to a new pair by kubelet's swap: write the new
// directory, point ..data_tmp at it, rename ..data_tmp over ..data.
func kubeletSecretDir(t *testing.T, dir, cn string) (certPath, keyPath string, rotate func(cn string)) {
	t.Helper()
	gen := 0
	write := func(cn string) {
		gen++
		ts := fmt.Sprintf("..2026_11_24_%02d", gen)
		if _, _, err := selfsigned.Write(filepath.Join(dir, ts), cn, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write(cn)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), write
}

// replaceFiles writes a new pair next to the listener's files and renames
// each over its target, as a deploy script or an editor does.
func replaceFiles(t *testing.T, certPath, keyPath, cn string) {
	t.Helper()
	tmp := t.TempDir()
	c, k, err := selfsigned.Write(tmp, cn, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{c: certPath, k: keyPath} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dst+".new", dst); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCertificateReload rotates a TLS and a DTLS listener's certificate
// under them, by kubelet's ..data swap and by renaming new files over the
// old: new handshakes get the new certificate within a second or two, and
// an allocation made over a TLS connection opened before the rotation keeps
// relaying. A pair that does not load (a key of another certificate) is
// refused and the last good pair stays in service.
func TestCertificateReload(t *testing.T) {
	secretDir := t.TempDir()
	certPath, keyPath, rotate := kubeletSecretDir(t, secretDir, "cert-a")
	plainDir := t.TempDir()
	plainCert, plainKey, err := selfsigned.Write(plainDir, "plain-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 29700, 29719)
	tlsL := config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}, Cert: certPath, Key: keyPath}
	dtlsL := config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: freePort(t, "udp"), Routes: []string{"local"}, Cert: certPath, Key: keyPath}
	plainL := config.Listener{Name: "tls-plain", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}, Cert: plainCert, Key: plainKey}
	cfg.Listeners = append(cfg.Listeners, tlsL, dtlsL, plainL)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv := startWith(t, cfg)
	testenv.Eventually(t, 2*time.Second, wantCN(servedCN, addrOf(tlsL), "cert-a"))
	testenv.Eventually(t, 2*time.Second, wantCN(servedDTLSCN, addrOf(dtlsL), "cert-a"))

	// An allocation over TLS, relaying to an echo peer before and after.
	peer := startEchoPeer(t, "127.0.0.1")
	c := dialRaw(t, tlsL, "user", "pass")
	const ch = 0x4001
	c.allocate(ch, peer.addr().AddrPort())
	relays := func() error {
		payload := []byte("through the old TLS connection..")
		if _, err := c.conn.Write(channelData(ch, payload, true)); err != nil {
			return err
		}
		m := c.read()
		if binary.BigEndian.Uint16(m) != ch || string(m[4:4+len(payload)]) != string(payload) {
			return fmt.Errorf("got % x, want the echo on channel %#x", m, ch)
		}
		return nil
	}
	if err := relays(); err != nil {
		t.Fatal(err)
	}

	rotate("cert-b")
	testenv.Eventually(t, 3*time.Second, wantCN(servedCN, addrOf(tlsL), "cert-b"))
	testenv.Eventually(t, 3*time.Second, wantCN(servedDTLSCN, addrOf(dtlsL), "cert-b"))
	if err := relays(); err != nil {
		t.Fatalf("allocation made before the rotation: %v", err)
	}
	if n := srv.Engine().Allocations(); n != 1 {
		t.Errorf("%d allocations after the rotation, want 1", n)
	}

	replaceFiles(t, plainCert, plainKey, "plain-b")
	testenv.Eventually(t, 3*time.Second, wantCN(servedCN, addrOf(plainL), "plain-b"))

	// A key that does not match the certificate: refused, cert-b stays.
	_, otherKey, err := selfsigned.Write(t.TempDir(), "other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plainKey, b, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // past the debounce: the bad pair has been tried
	if err := wantCN(servedCN, addrOf(plainL), "plain-b")(); err != nil {
		t.Fatalf("after a mismatched key: %v", err)
	}

	// A config change that keeps the paths does not restart the listener.
	next := *cfg
	next.Limits.MaxLifetime = 900
	if err := srv.Reconfigure(&next); err != nil {
		t.Fatal(err)
	}
	if err := relays(); err != nil {
		t.Fatalf("after a reconfigure with the same certificate paths: %v", err)
	}
}
