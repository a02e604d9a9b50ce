package dataplane

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/selfsigned"
)

// echoPeer is a UDP peer on a loopback address (127.0.0.1, ::1, ...) that
// echoes every datagram and counts them.
type echoPeer struct {
	conn *net.UDPConn
	got  atomic.Int64
}

func startEchoPeer(t *testing.T, ip string) *echoPeer {
	t.Helper()
	network := "udp4"
	if net.ParseIP(ip).To4() == nil {
		network = "udp6"
	}
	c, err := net.ListenUDP(network, &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	p := &echoPeer{conn: c}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			p.got.Add(1)
			_, _ = c.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close() })
	return p
}

func (p *echoPeer) addr() *net.UDPAddr { return p.conn.LocalAddr().(*net.UDPAddr) }

// echo sends payload from relay to the peer and waits for it to come back.
func echo(relay net.PacketConn, peer net.Addr, payload []byte, wait time.Duration) bool {
	if _, err := relay.WriteTo(payload, peer); err != nil {
		return false
	}
	buf := make([]byte, 2048)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		_ = relay.SetReadDeadline(deadline)
		n, _, err := relay.ReadFrom(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) == string(payload) {
			return true
		}
	}
	return false
}

// writeTestCert writes a self-signed certificate for 127.0.0.1 and
// localhost, and its key, into dir; it returns their paths.
func writeTestCert(t *testing.T, dir, cn string) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath, err := selfsigned.Write(dir, cn, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}
