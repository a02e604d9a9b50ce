//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/netns"
)

// setupNetns makes the -netns topology, places the launcher's servers and
// the generator's sockets in it, and returns its removal. Namespaces a
// killed run left (tob-PID-..., PID gone) are swept first.
func (c *common) setupNetns(l *launch.Launcher) (func(), error) {
	for _, n := range netns.Sweep() {
		fmt.Fprintf(os.Stderr, "removed stale namespace %s\n", n)
	}
	topo, err := netns.New(c.netns, "b")
	if err != nil {
		return nil, err
	}
	if c.gso {
		err := topo.SegmentGSO()
		if err == nil {
			err = topo.GROSink()
		}
		if err != nil {
			topo.Close()
			return nil, err
		}
	}
	if c.pin != "" {
		if err := topo.Steer(c.pin); err != nil {
			topo.Close()
			return nil, err
		}
	}
	fmt.Fprintf(os.Stderr, "made %s topology: namespaces %s\n", c.netns, strings.Join(topo.Names(), ", "))
	l.Netns, l.ClientNS, l.ListenIP, l.RelayIP = topo.Server, topo.Client, topo.ListenIP, topo.RelayIP
	if c.netns == "veth" {
		l.PeerNet = netip.MustParsePrefix("10.77.0.0/16")
	}
	bench.Net = bench.Placement{Topology: c.netns, ServerCPUs: c.pin, ClientNS: topo.Client, PeerNS: topo.Peer,
		ClientIP: topo.ClientIP, PeerIP: topo.PeerIP}
	return topo.Close, nil
}

// watchOffload registers t's kernel counter (tern_offload_packets_total,
// scraped in the servers' namespace) and prints which hook it attached
// (tern_offload_active).
func watchOffload(l *launch.Launcher, t bench.Target) {
	url := l.MetricsURL(t)
	ns := l.Netns
	read := func() (map[string]float64, error) { return scrape(ns, url) }
	bench.KernelCounters[t.Name] = func() (uint64, error) {
		m, err := read()
		if err != nil {
			return 0, err
		}
		var n float64
		for k, v := range m {
			if strings.HasPrefix(k, "tern_offload_packets_total{") {
				n += v
			}
		}
		return uint64(n), nil
	}
	if m, err := read(); err == nil {
		for k, v := range m {
			if strings.HasPrefix(k, "tern_offload_active{") {
				fmt.Fprintf(os.Stderr, "%s: %s %v\n", t.Name, k, v)
			}
		}
	} else {
		fmt.Fprintf(os.Stderr, "%s: metrics: %v\n", t.Name, err)
	}
}

// watchListeners registers t's listener counter (ternd's
// stunner_listener_packets_total, direction rx, all listeners), scraped
// in the servers' namespace.
func watchListeners(l *launch.Launcher, t bench.Target) {
	url, ns := l.MetricsURL(t), l.Netns
	bench.ListenerCounters[t.Name] = func() (uint64, error) {
		m, err := scrape(ns, url)
		if err != nil {
			return 0, err
		}
		var n float64
		for k, v := range m {
			if strings.HasPrefix(k, "stunner_listener_packets_total{") && strings.Contains(k, `direction="rx"`) {
				n += v
			}
		}
		return uint64(n), nil
	}
}

// scrape reads a Prometheus text page at url, dialed in namespace ns, into
// series text → value.
func scrape(ns, url string) (map[string]float64, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := netns.Do(ns, func() (err error) {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}
