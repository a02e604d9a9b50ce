package tlsrecord

import (
	"crypto/tls"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestAgainstOpenSSL takes connections over from crypto/tls as
// TestAgainstCryptoTLS does, with OpenSSL's client (`openssl s_client`,
// the TLS library of coturn's turnutils_uclient) at the other end, once
// per TLS 1.3 suite, Go's choice being the client's only offer: its data
// opens here and data sealed here prints at the client, and when the
// client asks for a key update (s_client's "K" command) the answer
// (SealKeyUpdate) moves this end's keys and the client reads what follows
// under them; closing its input ends in its close_notify.
func TestAgainstOpenSSL(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	testenv.Require(t, "openssl (hack/test-deps.sh installs it)", err)
	for _, id := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256} {
		name := tls.CipherSuiteName(id)
		t.Run(name, func(t *testing.T) {
			ln, conf, secrets := listenTLS(t)
			cmd := exec.Command(bin, "s_client", "-connect", ln.Addr().String(), "-tls1_3", "-ciphersuites", name)
			var out testenv.LockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
			raw, err := ln.Accept()
			if err != nil {
				t.Fatalf("accept: %v\n%s", err, out.String())
			}
			defer raw.Close()
			r, suite := takeOver(t, raw, conf, secrets)
			if suite != id {
				t.Fatalf("negotiated %s with a client that offered only %s", tls.CipherSuiteName(suite), name)
			}
			printed := func(want string) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for !strings.Contains(out.String(), want) {
					if time.Now().After(deadline) {
						t.Fatalf("s_client did not print %q:\n%s", want, out.String())
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			send := func(b []byte) {
				t.Helper()
				if _, err := raw.Write(b); err != nil {
					t.Fatal(err)
				}
			}
			next := func() (byte, []byte) {
				t.Helper()
				typ, p, err := r.Open(readRecord(t, raw))
				if err != nil {
					t.Fatalf("opening the client's record: %v", err)
				}
				return typ, p
			}

			if _, err := stdin.Write([]byte("hello from openssl\n")); err != nil {
				t.Fatal(err)
			}
			if typ, p := next(); typ != ContentAppData || string(p) != "hello from openssl\n" {
				t.Fatalf("client's data: type %d %q", typ, p)
			}
			b, err := r.SealData(nil, []byte("sealed by tern, first keys\n"))
			if err != nil {
				t.Fatal(err)
			}
			send(b)
			printed("sealed by tern, first keys")

			// s_client takes a command only at the start of what one read of
			// its input returns, and drops the rest: the data goes after it
			// has taken the K (it prints KEYUPDATE).
			if _, err := stdin.Write([]byte("K\n")); err != nil {
				t.Fatal(err)
			}
			printed("KEYUPDATE")
			if _, err := stdin.Write([]byte("after the update\n")); err != nil {
				t.Fatal(err)
			}
			typ, p := next()
			if typ != ContentHandshake {
				t.Fatalf("want the client's KeyUpdate, got type %d %q", typ, p)
			}
			respond, err := r.HandleHandshake(p)
			if err != nil || !respond {
				t.Fatalf("client's KeyUpdate: respond %v, %v; want true (s_client's K asks for one back)", respond, err)
			}
			if typ, p := next(); typ != ContentAppData || string(p) != "after the update\n" {
				t.Fatalf("client's data under its next keys: type %d %q", typ, p)
			}
			b, err = r.SealKeyUpdate(nil)
			if err != nil {
				t.Fatal(err)
			}
			if b, err = r.SealData(b, []byte("sealed by tern, next keys\n")); err != nil {
				t.Fatal(err)
			}
			send(b)
			printed("sealed by tern, next keys")

			_ = stdin.Close()
			if typ, p := next(); typ != ContentAlert || len(p) != 2 || p[1] != 0 {
				t.Fatalf("want the client's close_notify, got type %d %x", typ, p)
			}
		})
	}
}
