package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/udpio"
)

// TestListenerAddressNotShared: a TURN-UDP listener's sockets carry
// SO_REUSEPORT (one per reader thread), which would also let a socket of
// another process of the same user join them, and the kernel would then
// hand some clients to that process. A listener whose address is held
// already, by another ternd or by any socket with SO_REUSEPORT, must fail
// to start with an error naming the address, and the ternd holding it
// must keep serving.
func TestListenerAddressNotShared(t *testing.T) {
	loopback := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		name string
		// hold binds an address that covers 127.0.0.1:port, the way the
		// other holder would, and returns port and a check that the
		// holder still serves, or nil.
		hold func(t *testing.T) (port uint16, check func(t *testing.T))
	}{
		{"another ternd", func(t *testing.T) (uint16, func(t *testing.T)) {
			cfg := testConfig(t, 20000, 29999)
			startWith(t, cfg) // cfg then holds the ports it runs on
			return uint16(cfg.Listeners[0].Port), func(t *testing.T) {
				if _, err := pionClient(t, cfg, "user", "pass").Allocate(); err != nil {
					t.Errorf("the first ternd, after the second failed to start: Allocate: %v", err)
				}
			}
		}},
		{"a socket with SO_REUSEPORT", func(t *testing.T) (uint16, func(t *testing.T)) {
			return reusePortSocket(t, netip.AddrPortFrom(loopback, 0)), nil
		}},
		{"a wildcard socket with SO_REUSEPORT", func(t *testing.T) (uint16, func(t *testing.T)) {
			return reusePortSocket(t, netip.AddrPortFrom(netip.IPv4Unspecified(), 0)), nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, check := tc.hold(t)
			cfg := testConfig(t, 20000, 29999)
			cfg.Listeners[0].Port = int(port)
			// No metrics or health endpoint: the listener's is the only bind
			// that can fail, whatever else holds ports meanwhile.
			cfg.Admin.MetricsAddress, cfg.Admin.HealthAddress = "", ""
			addr := netip.AddrPortFrom(loopback, port)
			srv, err := New(cfg, Options{UDPThreads: 2, RelayThreads: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			err = srv.Start()
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), addr.String()+" is already bound by another socket") {
				t.Fatalf("Start on %v held by %s: %v, want EADDRINUSE naming the address", addr, tc.name, err)
			}
			if check != nil {
				check(t)
			}
		})
	}
}

// reusePortSocket binds a UDP socket with SO_REUSEPORT to addr (port 0:
// one the kernel picks) until the test ends, as another process of the same
// user could, and returns its port.
func reusePortSocket(t *testing.T, addr netip.AddrPort) uint16 {
	t.Helper()
	fd, err := udpio.Socket(addr, udpio.SocketOptions{ReusePort: true})
	if err != nil {
		t.Fatal(fmt.Errorf("holder socket: %w", err))
	}
	t.Cleanup(func() { unix.Close(fd) })
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(sa.(*unix.SockaddrInet4).Port)
}
