package main

import (
	"flag"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/tern-gw/tern/bench/forwarder"
	"github.com/tern-gw/tern/bench/pionserver"
)

func servePion(args []string) error {
	fs := flag.NewFlagSet("serve-pion", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:3478", "TURN-UDP address")
	relay := fs.String("relay-ip", "127.0.0.1", "relay address")
	minPort := fs.Uint("min-port", 20000, "lowest relay port")
	maxPort := fs.Uint("max-port", 29999, "highest relay port")
	threads := fs.Int("threads", 2, "SO_REUSEPORT listener sockets")
	realm := fs.String("realm", "stunner.l7mp.io", "realm")
	user := fs.String("user", "user", "username")
	pass := fs.String("pass", "pass", "password")
	buf := fs.Int("socket-buffer", 4<<20, "listener SO_RCVBUF/SO_SNDBUF, bytes")
	tcp := fs.String("tcp", "", "TURN-TCP address (empty: none)")
	tlsAddr := fs.String("tls", "", "TURN-TLS address (empty: none; needs -cert, -key)")
	dtlsAddr := fs.String("dtls", "", "TURN-DTLS address (empty: none; needs -cert, -key)")
	cert := fs.String("cert", "", "PEM certificate for TLS and DTLS")
	key := fs.String("key", "", "PEM private key for TLS and DTLS")
	peerNet := fs.String("peer-net", "", "peer prefix allowed besides loopback (empty: loopback only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var pn netip.Prefix
	if *peerNet != "" {
		var err error
		if pn, err = netip.ParsePrefix(*peerNet); err != nil {
			return err
		}
	}
	var streams [3]netip.AddrPort
	for i, s := range []string{*tcp, *tlsAddr, *dtlsAddr} {
		if s == "" {
			continue
		}
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return err
		}
		streams[i] = a
	}
	la, err := netip.ParseAddrPort(*listen)
	if err != nil {
		return err
	}
	ra, err := netip.ParseAddr(*relay)
	if err != nil {
		return err
	}
	s, err := pionserver.Start(pionserver.Config{Listen: la, Threads: *threads, RelayIP: ra,
		MinPort: uint16(*minPort), MaxPort: uint16(*maxPort), Realm: *realm, Username: *user, Password: *pass,
		SocketBuffer: *buf, TCP: streams[0], TLS: streams[1], DTLS: streams[2], Cert: *cert, Key: *key, PeerNet: pn})
	if err != nil {
		return err
	}
	waitSignal()
	return s.Close()
}

func serveForwarder(args []string) error {
	fs := flag.NewFlagSet("serve-forwarder", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:3479", "client-facing address")
	relay := fs.String("relay-ip", "127.0.0.1", "address of per-client relay sockets")
	threads := fs.Int("threads", 2, "SO_REUSEPORT listener sockets")
	buf := fs.Int("socket-buffer", 4<<20, "SO_RCVBUF/SO_SNDBUF of every socket, bytes")
	poller := fs.Bool("poller", false, "listener goroutines park in the Go netpoller instead of blocking in recvmmsg (ternd --io poller)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	la, err := netip.ParseAddrPort(*listen)
	if err != nil {
		return err
	}
	ra, err := netip.ParseAddr(*relay)
	if err != nil {
		return err
	}
	f, err := forwarder.Start(forwarder.Config{Listen: la, Threads: *threads, RelayIP: ra, SocketBuffer: *buf, Poller: *poller})
	if err != nil {
		return err
	}
	waitSignal()
	return f.Close()
}

func waitSignal() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
