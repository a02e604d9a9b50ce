//go:build cluster

package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// family6Alloc is a raw TURN client (bench/turnclient: pion/turn's client cannot send
// REQUESTED-ADDRESS-FAMILY) on an IPv6 socket of the test's network, with an IPv6 relayed
// transport address and a channel bound to one peer.
type family6Alloc struct {
	c     *turnclient.Client
	conn  *net.UDPConn
	relay netip.AddrPort // the XOR-RELAYED-ADDRESS
	ch    uint16
}

// allocate6 allocates on server (an IPv6 address) with REQUESTED-ADDRESS-FAMILY IPv6 (RFC
// 6156; RFC 8656 §7.2), wants the relayed transport address on relayIP, and binds channel ch
// to peer.
func allocate6(server netip.AddrPort, relayIP netip.Addr, peer netip.AddrPort, ch uint16) (*family6Alloc, error) {
	conn, err := listenClientUDP6()
	if err != nil {
		return nil, err
	}
	a := &family6Alloc{c: turnclient.New(conn, server, turnclient.Credentials{Username: turnUser, Password: turnPass}), conn: conn, ch: ch}
	relays, err := a.c.AllocateWith(0, turnclient.RequestedFamily(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("allocate on %v with REQUESTED-ADDRESS-FAMILY IPv6: %w", server, err)
	}
	if len(relays) != 1 || relays[0].Addr() != relayIP {
		a.Close()
		return nil, fmt.Errorf("allocate on %v with REQUESTED-ADDRESS-FAMILY IPv6: relayed transport addresses %v, want one on %v", server, relays, relayIP)
	}
	a.relay = relays[0]
	if err := a.c.ChannelBind(peer, ch); err != nil {
		a.Close()
		return nil, fmt.Errorf("ChannelBind %#x to %v on %v: %w", ch, peer, server, err)
	}
	return a, nil
}

// Close releases the allocation (a Refresh with LIFETIME 0, answered or not) and closes the
// socket.
func (a *family6Alloc) Close() {
	_ = a.c.Refresh(0)
	_ = a.conn.Close()
}

// echo sends payload as ChannelData on a's channel and waits up to timeout for it back.
func (a *family6Alloc) echo(payload []byte, timeout time.Duration) error {
	if _, err := a.conn.WriteToUDPAddrPort(turnclient.ChannelData(a.ch, payload), a.c.Server()); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	_ = a.conn.SetReadDeadline(time.Now().Add(timeout))
	defer a.conn.SetReadDeadline(time.Time{})
	for {
		n, err := a.conn.Read(buf)
		if err != nil {
			return fmt.Errorf("no echo of %q on channel %#x: %w", payload, a.ch, err)
		}
		if p, ok := turnclient.Payload(buf[:n]); ok && string(p) == string(payload) {
			return nil
		}
	}
}

// relay6Run is relayRun over IPv6 with REQUESTED-ADDRESS-FAMILY: clients raw TURN clients
// (allocate6) each get an IPv6 relayed transport address on relayIP from server and bind a
// channel to the echo at peer; each echoes once on its channel (the channel is in the
// kernel's maps once ChannelBind is answered: the engine reports a path before it answers);
// then ternd's counters at metricsURL are read into lastWarmCounts, and each client sends
// packets ChannelData of runSize bytes runGap apart and counts the distinct echoes that come
// back within runLinger of its last send. Every allocation is released at the end.
func relay6Run(server netip.AddrPort, relayIP netip.Addr, peer netip.AddrPort, metricsURL string, clients, packets int) (runResult, error) {
	res := runResult{clients: clients}
	allocs := make([]*family6Alloc, 0, clients)
	defer func() {
		for _, a := range allocs {
			a.Close()
		}
	}()
	for i := range clients {
		a, err := allocate6(server, relayIP, peer, uint16(0x4000+i))
		if err != nil {
			return res, fmt.Errorf("client %d: %w", i, err)
		}
		allocs = append(allocs, a)
		if err := a.echo([]byte(fmt.Sprintf("warm-%d", i)), 2*time.Second); err != nil {
			return res, fmt.Errorf("client %d: %w", i, err)
		}
	}
	before, err := scrapeOffload(metricsURL)
	if err != nil {
		return res, err
	}
	lastWarmCounts = before
	return fanOut(len(allocs), func(id int) (int, int, error) {
		return allocs[id].relayRun(uint32(id), packets)
	})
}

// relayRun sends packets ChannelData of runSize bytes (id, then the sequence number) on a's
// channel runGap apart and counts the distinct echoes back within runLinger of the last send.
func (a *family6Alloc) relayRun(id uint32, packets int) (sent, received int, err error) {
	seen := make([]bool, packets)
	all := make(chan struct{})
	done := make(chan struct{})
	var count int
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, err := a.conn.Read(buf)
			if err != nil {
				return // the deadline set below
			}
			p, ok := turnclient.Payload(buf[:n])
			if !ok || len(p) != runSize || binary.BigEndian.Uint32(p[0:4]) != id {
				continue
			}
			if seq := int(binary.BigEndian.Uint32(p[4:8])); seq < packets && !seen[seq] {
				seen[seq] = true
				if count++; count == packets {
					close(all)
				}
			}
		}
	}()
	msg := make([]byte, runSize)
	binary.BigEndian.PutUint32(msg[0:4], id)
	for seq := range packets {
		binary.BigEndian.PutUint32(msg[4:8], uint32(seq))
		if _, err = a.conn.WriteToUDPAddrPort(turnclient.ChannelData(a.ch, msg), a.c.Server()); err != nil {
			break
		}
		sent++
		time.Sleep(runGap)
	}
	select {
	case <-all:
	case <-time.After(runLinger):
	}
	_ = a.conn.SetReadDeadline(time.Now())
	<-done
	_ = a.conn.SetReadDeadline(time.Time{})
	return sent, count, err
}

// ipv6Of parses a pod's IPv6 address (pod.ip6), failing when the pod has none: the pod network
// of hack/cluster.sh is dual-stack, so every pod on it has one.
func ipv6Of(p pod) (netip.Addr, error) {
	if p.ip6 == "" {
		return netip.Addr{}, fmt.Errorf("pod %v has no IPv6 address in status.podIPs (is the cluster's pod network dual-stack?)", p)
	}
	ip, err := netip.ParseAddr(p.ip6)
	if err != nil || !ip.Is6() {
		return netip.Addr{}, errors.Join(fmt.Errorf("pod %v: IPv6 address %q", p, p.ip6), err)
	}
	return ip, nil
}
