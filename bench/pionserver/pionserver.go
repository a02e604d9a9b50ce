// Package pionserver runs a pion/turn v4 server the way its multithreaded
// example does (several SO_REUSEPORT listener sockets on one address), as a
// peer for ternbench to compare Tern against. It only wraps the library:
// nothing here is tuned beyond what a pion/turn user would write.
package pionserver

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"

	"github.com/pion/dtls/v3"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/bench/udpbatch"
)

// Config describes the server.
type Config struct {
	// Listen is the TURN-UDP address, e.g. 127.0.0.1:3478.
	Listen netip.AddrPort
	// Threads is the number of SO_REUSEPORT listener sockets (pion serves
	// each with its own goroutine). Default 2.
	Threads int
	// RelayIP is the address relay sockets bind to and advertise.
	RelayIP netip.Addr
	// MinPort and MaxPort bound relay ports, inclusive.
	MinPort, MaxPort uint16
	// Realm, Username and Password are the static long-term credentials.
	Realm, Username, Password string
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF of the listener sockets in bytes
	// (0: kernel default).
	SocketBuffer int
	// TCP, TLS and DTLS are TURN-TCP, TURN-TLS and TURN-DTLS addresses to
	// listen on too (zero: none), pion/turn's ListenerConfigs; TLS and
	// DTLS need Cert and Key (PEM files).
	TCP, TLS, DTLS netip.AddrPort
	Cert, Key      string
	// PeerNet is a peer prefix allowed besides loopback (the veth
	// topology's peers, issue 15); invalid: loopback only.
	PeerNet netip.Prefix
}

// Server is a running pion/turn server.
type Server struct {
	s    *turn.Server
	addr netip.AddrPort
}

// Addr is the TURN-UDP address the server listens on.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Start opens the listeners and starts serving.
func Start(c Config) (*Server, error) {
	if c.Threads < 1 {
		c.Threads = 2
	}
	gen := &turn.RelayAddressGeneratorPortRange{
		RelayAddress: net.IP(c.RelayIP.AsSlice()),
		Address:      c.RelayIP.String(),
		MinPort:      c.MinPort,
		MaxPort:      c.MaxPort,
		// pion picks ports at random; with a nearly full range its default
		// of 10 tries fails allocations long before the range is used up,
		// which would understate how many allocations it can hold.
		MaxRetries: 1000,
	}
	// Loopback peers only: the harness never relays anywhere else, and an
	// open relay on a shared machine is not something to leave running.
	loopbackOnly := func(_ net.Addr, peer net.IP) bool {
		if peer.IsLoopback() {
			return true
		}
		a, ok := netip.AddrFromSlice(peer)
		return ok && c.PeerNet.IsValid() && c.PeerNet.Contains(a.Unmap())
	}
	key := turn.GenerateAuthKey(c.Username, c.Realm, c.Password)
	var pcs []turn.PacketConnConfig
	closeAll := func() {
		for _, p := range pcs {
			p.PacketConn.Close()
		}
	}
	for i := 0; i < c.Threads; i++ {
		uc, err := udpbatch.Listen(c.Listen, udpbatch.Options{ReusePort: true, Buffer: c.SocketBuffer})
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("pionserver: listener %d: %w", i, err)
		}
		if i == 0 && c.Listen.Port() == 0 {
			// Port 0: the other sockets join the port the first one got.
			c.Listen = uc.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort()
		}
		pcs = append(pcs, turn.PacketConnConfig{PacketConn: uc, RelayAddressGenerator: gen, PermissionHandler: loopbackOnly})
	}
	var lcs []turn.ListenerConfig
	closeAll = func() {
		for _, p := range pcs {
			p.PacketConn.Close()
		}
		for _, l := range lcs {
			l.Listener.Close()
		}
	}
	streams, err := listenStreams(c)
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, ln := range streams {
		lcs = append(lcs, turn.ListenerConfig{Listener: ln, RelayAddressGenerator: gen, PermissionHandler: loopbackOnly})
	}
	s, err := turn.NewServer(turn.ServerConfig{
		ListenerConfigs: lcs,
		Realm:           c.Realm,
		AuthHandler: func(username, realm string, _ net.Addr) ([]byte, bool) {
			return key, username == c.Username && realm == c.Realm
		},
		PacketConnConfigs: pcs,
	})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("pionserver: %w", err)
	}
	return &Server{s: s, addr: c.Listen}, nil
}

// listenStreams opens the TCP, TLS and DTLS listeners c asks for.
func listenStreams(c Config) ([]net.Listener, error) {
	var out []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, l := range out {
			l.Close()
		}
		return nil, fmt.Errorf("pionserver: %w", err)
	}
	if c.TCP.IsValid() {
		l, err := net.Listen("tcp", c.TCP.String())
		if err != nil {
			return fail(err)
		}
		out = append(out, l)
	}
	if !c.TLS.IsValid() && !c.DTLS.IsValid() {
		return out, nil
	}
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return fail(err)
	}
	if c.TLS.IsValid() {
		l, err := tls.Listen("tcp", c.TLS.String(), &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			return fail(err)
		}
		out = append(out, l)
	}
	if c.DTLS.IsValid() {
		l, err := dtls.Listen("udp", net.UDPAddrFromAddrPort(c.DTLS), &dtls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			return fail(err)
		}
		out = append(out, l)
	}
	return out, nil
}

// Close stops the server and closes its sockets.
func (s *Server) Close() error { return s.s.Close() }
