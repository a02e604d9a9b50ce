package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// TestWrite checks that the pair loads as a TLS key pair and that the certificate verifies
// for 127.0.0.1 and localhost against itself, within its validity only.
func TestWrite(t *testing.T) {
	crt, key, err := Write(t.TempDir(), "tern test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", CurrentTime: time.Now().Add(2 * time.Hour)}); err == nil {
		t.Error("certificate still valid past its validity")
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}
