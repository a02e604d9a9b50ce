package dtls

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/dtls/v2/pkg/crypto/selfsign"

	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
)

// capturingConn is a client's UDP socket that hands a copy of each datagram
// it sends to sent, so a test can open the client's records itself.
type capturingConn struct {
	net.Conn
	sent chan []byte
}

func (c *capturingConn) Write(p []byte) (int, error) {
	select {
	case c.sent <- append([]byte(nil), p...):
	default:
	}
	return c.Conn.Write(p)
}

// handshake runs a pion/dtls client against an association of a real
// dtlsMux, with the server's config built as Start and serveConn build
// it, and returns the association, pion's two ends and the client's
// captured datagrams.
func handshake(t *testing.T, suite dtls.CipherSuiteID) (*assoc, *dtls.Conn, *dtls.Conn, chan []byte) {
	t.Helper()
	cert, err := selfsign.GenerateSelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := newDTLSMux(uc, 4)
	if err != nil {
		t.Fatal(err)
	}
	go m.run()
	t.Cleanup(m.close)

	raw, err := net.DialUDP("udp", nil, uc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	cc := &capturingConn{Conn: raw, sent: make(chan []byte, 64)}
	type result struct {
		c   *dtls.Conn
		err error
	}
	client := make(chan result, 1)
	go func() {
		c, err := dtls.Client(cc, &dtls.Config{
			CipherSuites:         []dtls.CipherSuiteID{suite},
			InsecureSkipVerify:   true,
			ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
		})
		client <- result{c, err}
	}()

	var a *assoc
	select {
	case a = <-m.accept:
	case <-time.After(5 * time.Second):
		t.Fatal("no association")
	}
	// The listener's config as Start makes it, with a certificate of
	// the test's; assocConfig adds the association's key log.
	l := &Listener{conf: &dtls.Config{
		Certificates:         []tls.Certificate{cert},
		ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	server, err := dtls.ServerWithContext(ctx, a, l.assocConfig(a))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	r := <-client
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	// Drop the handshake's datagrams: only application data is opened.
	for len(cc.sent) > 0 {
		<-cc.sent
	}
	return a, server, r.c, cc.sent
}

// TestRecordKeysMatchPion checks that the record layer's keys, derived from
// what pion/dtls's key log and the wire show, are the keys pion's own
// handshake agreed: a record Tern seals is read by pion's client, and a
// record pion's client sends is opened by Tern. If the two disagreed on a
// key, an IV or the epoch, pion would drop the record and Tern's open would
// fail.
func TestRecordKeysMatchPion(t *testing.T) {
	for _, suite := range []dtls.CipherSuiteID{
		dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		dtls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	} {
		t.Run(suite.String(), func(t *testing.T) {
			a, _, client, sent := handshake(t, suite)
			rec, err := a.gcmRecords()
			if err != nil {
				t.Fatal(err)
			}
			if rec.Epoch() != 1 {
				t.Errorf("epoch %d, want 1", rec.Epoch())
			}
			if s := rec.NextSeq(); s <= record.PionSeqHeadroom {
				t.Errorf("first sequence number %d, want past pion's by %d", s, uint64(record.PionSeqHeadroom))
			}

			// Tern → pion.
			sealed, err := rec.Seal(nil, []byte("from tern"))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.mux.out.SendTo(sealed, a.remote); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1500)
			_ = client.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, err := client.Read(buf)
			if err != nil || string(buf[:n]) != "from tern" {
				t.Fatalf("pion's client read %q, %v; want the record Tern sealed", buf[:n], err)
			}

			// pion → Tern.
			if _, err := client.Write([]byte("from pion")); err != nil {
				t.Fatal(err)
			}
			select {
			case d := <-sent:
				p, ok := rec.Open(d)
				if !ok || string(p) != "from pion" {
					t.Fatalf("Tern opened %q, %v; want pion's record", p, ok)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the client sent nothing")
			}
		})
	}
}

// TestRecordKeysOtherSuite: a suite without a fast path is left to pion.
func TestRecordKeysOtherSuite(t *testing.T) {
	a, _, _, _ := handshake(t, dtls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA)
	if _, err := a.gcmRecords(); !errors.Is(err, record.ErrNoFastPath) {
		t.Fatalf("gcmRecords = %v, want record.ErrNoFastPath", err)
	}
}
