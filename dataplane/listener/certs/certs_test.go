package certs

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

func commonName(t *testing.T, h *Holder) string {
	t.Helper()
	c, err := h.GetCertificate(nil)
	if err != nil || c == nil || c.Leaf == nil {
		t.Fatalf("GetCertificate: %v, %v", c, err)
	}
	return c.Leaf.Subject.CommonName
}

// copyPair overwrites dst's certificate and key files with a new pair of
// common name cn, in place (no rename).
func copyPair(t *testing.T, certPath, keyPath, cn string) {
	t.Helper()
	c, k, err := selfsigned.Write(t.TempDir(), cn, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{c: certPath, k: keyPath} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCertHolderPollsWithoutWatcher: with the file watch gone (as on a
// file system that sends no events), the periodic re-read still picks up a
// new pair.
func TestCertHolderPollsWithoutWatcher(t *testing.T) {
	defer func(d time.Duration) { certPollInterval = d }(certPollInterval)
	certPollInterval = 50 * time.Millisecond
	certPath, keyPath, err := selfsigned.Write(t.TempDir(), "poll-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(config.Listener{Name: "tls", Cert: certPath, Key: keyPath}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.watcher == nil {
		t.Skip("no file watcher on this system")
	}
	h.watcher.Close() // the run loop must carry on polling, not spin on closed channels
	if cn := commonName(t, h); cn != "poll-a" {
		t.Fatalf("serves %q, want poll-a", cn)
	}
	copyPair(t, certPath, keyPath, "poll-b")
	testenv.Eventually(t, 2*time.Second, func() error {
		if cn := commonName(t, h); cn != "poll-b" {
			return os.ErrNotExist
		}
		return nil
	})
}

// TestCertHolderKeepsGoodPair: unreadable or mismatched files leave the
// pair in service; a good pair then replaces it.
func TestCertHolderKeepsGoodPair(t *testing.T) {
	certPath, keyPath, err := selfsigned.Write(t.TempDir(), "good", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(config.Listener{Name: "tls", Cert: certPath, Key: keyPath}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := os.WriteFile(certPath, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.reload()
	if cn := commonName(t, h); cn != "good" {
		t.Fatalf("after a broken certificate file: %q", cn)
	}
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	h.reload()
	if cn := commonName(t, h); cn != "good" {
		t.Fatalf("after a missing key file: %q", cn)
	}
	copyPair(t, certPath, keyPath, "better")
	h.reload()
	if cn := commonName(t, h); cn != "better" {
		t.Fatalf("after a good pair: %q, want better", cn)
	}
	if _, err := New(config.Listener{Name: "bad", Cert: certPath, Key: certPath}, slog.Default()); err == nil {
		t.Error("New with a certificate as its key: no error")
	}
}
