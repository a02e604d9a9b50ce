package e2e

import (
	"net"
	"testing"

	"github.com/pion/dtls/v2"
)

// takeoverDTLSConfig is takeoverConfig with a TURN-DTLS listener after the
// TURN-UDP one; dtlsAddr returns its address once the config is written.
func takeoverDTLSConfig(t *testing.T) (mutate func(*config), dtlsAddr func(*server) *net.UDPAddr) {
	t.Helper()
	base := takeoverConfig(t)
	cert, key := writeTestCert(t, t.TempDir())
	port, release := freePort(t, "udp4")
	release()
	mutate = func(c *config) {
		base(c)
		c.Listeners = append(c.Listeners, listener{Name: "dtls", Protocol: "TURN-DTLS", Address: "127.0.0.1", Port: port,
			Routes: []string{"local"}, Cert: cert, Key: key})
	}
	return mutate, func(*server) *net.UDPAddr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} }
}

// startDTLSFlows is startFlows for n pion/turn clients over DTLS to the
// TURN-DTLS listener at addr.
func startDTLSFlows(t *testing.T, addr *net.UDPAddr, echo *peer, n int) []*flow {
	t.Helper()
	flows := make([]*flow, n)
	for i := range flows {
		dc, err := dtls.Dial("udp4", addr, &dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec // self-signed test certificate
		if err != nil {
			t.Fatal(err)
		}
		f := &flow{c: newPionClientOn(t, dtlsConn{dc}, addr, testUser, testPassword)}
		f.relay = f.c.allocate(t)
		roundTrips(t, f.relay, echo.addr, 3)
		flows[i] = f
	}
	return flows
}
