package e2e

import (
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/selfsigned"
)

// writeTestCert writes a self-signed certificate for 127.0.0.1 and its key, valid for an
// hour, into dir as PEM files and returns their paths.
func writeTestCert(t *testing.T, dir string) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath, err := selfsigned.Write(dir, "tern e2e", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}
