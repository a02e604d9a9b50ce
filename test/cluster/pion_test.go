//go:build cluster

package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"
)

// turnAlloc is a pion/turn client with one UDP allocation.
type turnAlloc struct {
	client *turn.Client
	conn   net.PacketConn // the client's own socket, towards the TURN server
	relay  net.PacketConn // the allocation: WriteTo sends through the relay to a peer
}

// Close releases the allocation (pion sends a Refresh with LIFETIME 0, RFC 8656 §7.2, without
// waiting for the answer), then closes the client and its socket.
func (a *turnAlloc) Close() {
	_ = a.relay.Close()
	a.client.Close()
	_ = a.conn.Close()
}

// allocate makes a pion/turn client with a UDP allocation on server (host:port), with the
// TURN credentials of the reference Gateway.
func allocate(server string) (*turnAlloc, error) {
	return allocateFrom(server, nil)
}

// clientPorts hands out the local ports of the tests' pion/turn clients: below the kernel's
// ephemeral range (32768-60999 by default), where turnutils_uclient's sockets get theirs, and
// below the node ports (30000-32767), each port once per test process. A client that reused the
// 5-tuple of an allocation another client left on a ternd (uclient's, or an earlier pion
// client's, until it expires) would get 437 Allocation Mismatch: seen once in
// TestDaemonSetRelay.
var clientPorts struct {
	sync.Mutex
	next int
}

// listenClientUDP opens a pion client's socket on the test's own network at a port of
// clientPorts.
func listenClientUDP() (net.PacketConn, error) {
	return listenClientOn("udp4", "0.0.0.0")
}

// listenClientUDP6 is listenClientUDP for an IPv6 client: a socket on [::] (IPV6_V6ONLY, as
// Go opens "udp6" sockets).
func listenClientUDP6() (*net.UDPConn, error) {
	c, err := listenClientOn("udp6", "::")
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

// listenClientOn opens a client's socket of network ("udp4", "udp6") on host at a port of
// clientPorts.
func listenClientOn(network, host string) (net.PacketConn, error) {
	clientPorts.Lock()
	defer clientPorts.Unlock()
	if clientPorts.next == 0 {
		clientPorts.next = 10000 + rand.IntN(10000)
	}
	for range 1000 {
		p := clientPorts.next
		if clientPorts.next++; clientPorts.next >= 30000 {
			clientPorts.next = 10000
		}
		conn, err := net.ListenPacket(network, net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
	return nil, errors.New("no free client port in 10000-29999")
}

// listenFunc opens a client's UDP socket; nil is listenClientUDP.
type listenFunc func() (net.PacketConn, error)

// allocateFrom is allocate with the client's socket opened by listen.
func allocateFrom(server string, listen listenFunc) (*turnAlloc, error) {
	if listen == nil {
		listen = listenClientUDP
	}
	conn, err := listen()
	if err != nil {
		return nil, err
	}
	return allocateOn(conn, server)
}

// allocateOn is allocate with conn as the client's socket (one opened in a node's network
// namespace, say); conn is closed on error and by Close.
func allocateOn(conn net.PacketConn, server string) (*turnAlloc, error) {
	c, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: server,
		TURNServerAddr: server,
		Username:       turnUser,
		Password:       turnPass,
		Realm:          turnRealm,
		Conn:           conn,
		LoggerFactory:  &logging.DefaultLoggerFactory{DefaultLogLevel: logging.LogLevelError},
		RTO:            200 * time.Millisecond,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.Listen(); err != nil {
		c.Close()
		conn.Close()
		return nil, err
	}
	relay, err := c.Allocate()
	if err != nil {
		c.Close()
		conn.Close()
		return nil, fmt.Errorf("allocate on %s: %w", server, err)
	}
	return &turnAlloc{client: c, conn: conn, relay: relay}, nil
}

// echoOnce allocates on server, relays one datagram to the echo on ip:9001 and waits up to
// timeout for it to come back, then releases the allocation.
func echoOnce(server, ip string, timeout time.Duration) error {
	a, err := allocate(server)
	if err != nil {
		return err
	}
	defer a.Close()
	return echoVia(a.relay, ip, timeout)
}

// echoVia sends a datagram through relay to the echo on ip:9001 and waits for it to come back.
// A refused permission (403) comes back as WriteTo's error.
func echoVia(relay net.PacketConn, ip string, timeout time.Duration) error {
	peer := &net.UDPAddr{IP: net.ParseIP(ip), Port: echoPort}
	msg := []byte("tern-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	if _, err := relay.WriteTo(msg, peer); err != nil {
		return fmt.Errorf("relay to %v: %w", peer, err)
	}
	buf := make([]byte, 1500)
	deadline := time.Now().Add(timeout)
	for {
		_ = relay.SetReadDeadline(deadline)
		n, from, err := relay.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo from %v through the relay: %w", peer, err)
		}
		if from.String() == peer.String() && bytes.Equal(buf[:n], msg) {
			return nil
		}
	}
}

// runResult is what a relay run counted.
type runResult struct {
	clients, sent, received int
}

func (r runResult) lost() int { return r.sent - r.received }

func (r runResult) String() string {
	return fmt.Sprintf("%d clients: sent %d, received %d, lost %d", r.clients, r.sent, r.received, r.lost())
}

// Relay runs: the pace of each client's datagrams, their size (turnutils_uclient's default),
// and how long echoes may still arrive after a client's last send.
const (
	runGap     = 2 * time.Millisecond
	runSize    = 100
	runLinger  = 2 * time.Second
	runClients = 10
	runPackets = 100
)

// relayRun is pion's counterpart of turnutils_uclient's run: clients pion/turn clients each
// allocate on server and send packets datagrams of runSize bytes, runGap apart, through their
// relay to the echo on peerIP:9001, and count the distinct datagrams that come back within
// runLinger of the last send. Every allocation is released at the end. An error is a client
// that could not allocate or send; lost datagrams are in the result.
func relayRun(server, peerIP string, clients, packets int) (runResult, error) {
	return relayRunFrom(server, peerIP, clients, packets, nil)
}

// relayRunFrom is relayRun with each client's socket opened by listen.
func relayRunFrom(server, peerIP string, clients, packets int, listen listenFunc) (runResult, error) {
	return fanOut(clients, func(id int) (int, int, error) {
		return relayClient(server, peerIP, uint32(id), packets, listen)
	})
}

// fanOut runs run for clients 0 to clients-1 side by side and adds up what
// they sent and got back; the error is one of the clients' that failed,
// named by its number.
func fanOut(clients int, run func(id int) (sent, received int, err error)) (runResult, error) {
	res := runResult{clients: clients}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for id := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent, got, err := run(id)
			mu.Lock()
			res.sent += sent
			res.received += got
			mu.Unlock()
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return res, <-errs
}

// relayClient is one client of relayRun; it returns how many datagrams it sent and how many
// distinct ones came back.
func relayClient(server, peerIP string, id uint32, packets int, listen listenFunc) (sent, received int, err error) {
	a, err := allocateFrom(server, listen)
	if err != nil {
		return 0, 0, err
	}
	defer a.Close()
	return relayOn(a, peerIP, id, packets)
}

// relayOn sends relayClient's datagrams through a's relay and counts the echoes; it leaves a's
// relay with a read deadline in the past.
func relayOn(a *turnAlloc, peerIP string, id uint32, packets int) (sent, received int, err error) {
	peer := &net.UDPAddr{IP: net.ParseIP(peerIP), Port: echoPort}
	seen := make([]bool, packets)
	var count int
	var mu sync.Mutex
	all := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := a.relay.ReadFrom(buf)
			if err != nil {
				return // the deadline set below, or Close
			}
			if from.String() != peer.String() || n != runSize || binary.BigEndian.Uint32(buf[0:4]) != id {
				continue
			}
			seq := int(binary.BigEndian.Uint32(buf[4:8]))
			mu.Lock()
			if seq < packets && !seen[seq] {
				seen[seq] = true
				count++
				if count == packets {
					close(all)
				}
			}
			mu.Unlock()
		}
	}()
	msg := make([]byte, runSize)
	binary.BigEndian.PutUint32(msg[0:4], id)
	for seq := range packets {
		binary.BigEndian.PutUint32(msg[4:8], uint32(seq))
		if _, err = a.relay.WriteTo(msg, peer); err != nil {
			break
		}
		sent++
		time.Sleep(runGap)
	}
	select {
	case <-all:
	case <-time.After(runLinger):
	}
	_ = a.relay.SetReadDeadline(time.Now())
	<-done
	mu.Lock()
	defer mu.Unlock()
	return sent, count, err
}
