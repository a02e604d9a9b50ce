package dtls

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	dtlsv3 "github.com/pion/dtls/v3"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestHandshakeInterop: clients other than pion/dtls v2 pass the
// listener's ClientHello filter and have their association verified by
// the cookie of pion's HelloVerifyRequest: pion/dtls v3 (pion/turn v4's)
// and OpenSSL's s_client, which sends its first ClientHello with record
// version DTLS 1.0 (RFC 6347 §4.1). pion/dtls v2 is
// TestHelloFloodBoundsUnverified's client; coturn's turnutils_uclient -S is
// test/e2e's TestCoturnUclient/DTLS.
func TestHandshakeInterop(t *testing.T) {
	t.Run("pion/dtls v3", func(t *testing.T) {
		s := startTestServer(t)
		raw, err := net.DialUDP("udp", nil, s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := dtlsv3.Client(dtlsv3PacketConn{raw}, s.addr, &dtlsv3.Config{
			InsecureSkipVerify:   true, //nolint:gosec // the test's self-signed certificate
			ExtendedMasterSecret: dtlsv3.RequireExtendedMasterSecret,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.HandshakeContext(ctx); err != nil {
			t.Fatalf("pion/dtls v3 handshake: %v", err)
		}
		if v := s.verified.Load(); v != 1 {
			t.Fatalf("%d ClientHellos verified, want 1", v)
		}
	})
	t.Run("openssl s_client", func(t *testing.T) {
		bin, err := exec.LookPath("openssl")
		testenv.Require(t, "openssl", err)
		s := startTestServer(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// stdin is empty: s_client handshakes, then closes at its end.
		out, err := exec.CommandContext(ctx, bin, "s_client", "-dtls1_2", "-connect", s.addr.String()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Cipher is ECDHE-") {
			t.Fatalf("openssl s_client -dtls1_2: %v\n%s", err, out)
		}
		if v := s.verified.Load(); v != 1 {
			t.Fatalf("%d ClientHellos verified, want 1", v)
		}
	})
}

// dtlsv3PacketConn is a connected UDP socket as the net.PacketConn
// pion/dtls v3 wants.
type dtlsv3PacketConn struct{ *net.UDPConn }

func (c dtlsv3PacketConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.Write(b) }
func (c dtlsv3PacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.Read(b)
	return n, c.RemoteAddr(), err
}
