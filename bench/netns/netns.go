//go:build linux

// Package netns makes the network namespaces ternbench's offload
// measurements run in (issue 15), runs code inside them, and removes them.
//
// bpf_fib_lookup refuses to relay when forwarding is off on the arrival
// interface, and the host's must never be changed, so every offload
// measurement runs in namespaces made here: sysctls set inside them are
// the namespace's own. Names start with Prefix ("tob-") and carry the
// creating process's PID, so a later run can sweep what a killed one left.
package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Prefix starts every namespace this package makes.
const Prefix = "tob-"

// Topology is a set of namespaces made for one run.
type Topology struct {
	// Kind is "loopback" or "veth".
	Kind string
	// Server is where the servers run; for "loopback" everything does.
	Server string
	// Client and Peer are the namespaces of the generator's clients'
	// sockets and of the peer's; for "loopback" both are Server.
	Client, Peer string
	// ListenIP is the servers' client-facing address, ClientIP the
	// generator's clients', PeerIP the peer's; RelayIP the first server's
	// relay address (the others follow, +1 each).
	ListenIP, ClientIP, PeerIP, RelayIP netip.Addr
	names                               []string
}

// The veth topology: client 10.77.1.2 — 10.77.1.1 server (relays from
// 10.77.2.1 and up, forwarding on) 10.77.2.0/24 — 10.77.2.100 peer.
var (
	vethListen = netip.MustParseAddr("10.77.1.1")
	vethClient = netip.MustParseAddr("10.77.1.2")
	vethRelay  = netip.MustParseAddr("10.77.2.1")
	vethPeer   = netip.MustParseAddr("10.77.2.100")
)

// VethRelays is how many relay addresses the server namespace of a veth
// topology has (one per launched server).
const VethRelays = 8

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Sweep removes namespaces named Prefix+PID-... whose PID is no longer
// alive: what a killed run left. It returns the names removed.
func Sweep() []string {
	ents, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return nil
	}
	var gone []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), Prefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
			continue // its owner still runs
		}
		if ip("netns", "del", e.Name()) == nil {
			gone = append(gone, e.Name())
		}
	}
	return gone
}

// New makes a topology of kind "loopback" (one namespace, lo up, forwarding
// on: servers, generator and peer all on 127.0.0.0/8 in it) or "veth"
// (client — server — peer namespaces joined by two veth pairs, forwarding
// on in the server's, default routes through it so the no-server baseline
// is routed there too). tag tells concurrent topologies of one process
// apart. On error nothing is left behind. Needs root and iproute2.
func New(kind, tag string) (*Topology, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("netns: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	base := fmt.Sprintf("%s%d-%s", Prefix, os.Getpid(), tag)
	t := &Topology{Kind: kind}
	var err error
	switch kind {
	case "loopback":
		err = t.loopback(base)
	case "veth":
		err = t.veth(base)
	default:
		return nil, fmt.Errorf("netns: unknown topology %q (want loopback or veth)", kind)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Topology) add(name string) error {
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	t.names = append(t.names, name)
	return ip("-n", name, "link", "set", "lo", "up")
}

// forwarding turns IPv4 forwarding on in namespace ns (its own sysctls).
func forwarding(ns string) error {
	for _, k := range []string{"net.ipv4.conf.all.forwarding=1", "net.ipv4.conf.lo.forwarding=1"} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-q", "-w", k).CombinedOutput(); err != nil {
			return fmt.Errorf("sysctl %s in %s: %v: %s", k, ns, err, out)
		}
	}
	return nil
}

func (t *Topology) loopback(base string) error {
	t.Server = base + "l"
	if err := t.add(t.Server); err != nil {
		return err
	}
	t.Client, t.Peer = t.Server, t.Server
	t.ListenIP = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	t.ClientIP = netip.Addr{} // the generator's own 127.0.97.x
	t.PeerIP = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	t.RelayIP = netip.AddrFrom4([4]byte{127, 0, 0, 2})
	return forwarding(t.Server)
}

func (t *Topology) veth(base string) error {
	t.Client, t.Server, t.Peer = base+"c", base+"s", base+"p"
	for _, n := range []string{t.Client, t.Server, t.Peer} {
		if err := t.add(n); err != nil {
			return err
		}
	}
	// Interface names are at most 15 bytes: the PID and tag are in the
	// namespaces' names, the ends are named the same in every topology.
	steps := [][]string{
		{"link", "add", "tobc", "netns", t.Client, "type", "veth", "peer", "name", "tobsc", "netns", t.Server},
		{"link", "add", "tobp", "netns", t.Peer, "type", "veth", "peer", "name", "tobsp", "netns", t.Server},
		{"-n", t.Client, "addr", "add", vethClient.String() + "/24", "dev", "tobc"},
		{"-n", t.Server, "addr", "add", vethListen.String() + "/24", "dev", "tobsc"},
		{"-n", t.Peer, "addr", "add", vethPeer.String() + "/24", "dev", "tobp"},
	}
	r := vethRelay
	for range VethRelays {
		steps = append(steps, []string{"-n", t.Server, "addr", "add", r.String() + "/24", "dev", "tobsp"})
		r = r.Next()
	}
	for _, l := range [][2]string{{t.Client, "tobc"}, {t.Server, "tobsc"}, {t.Server, "tobsp"}, {t.Peer, "tobp"}} {
		steps = append(steps, []string{"-n", l[0], "link", "set", l[1], "up"})
	}
	steps = append(steps,
		[]string{"-n", t.Client, "route", "add", "default", "via", vethListen.String()},
		[]string{"-n", t.Peer, "route", "add", "default", "via", vethRelay.String()})
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	t.ListenIP, t.ClientIP, t.PeerIP, t.RelayIP = vethListen, vethClient, vethPeer, vethRelay
	return forwarding(t.Server)
}

// Close removes the topology's namespaces (and with them their veths).
func (t *Topology) Close() {
	for i := len(t.names) - 1; i >= 0; i-- {
		_ = ip("netns", "del", t.names[i])
	}
	t.names = nil
}

// Names are the namespaces made, in order.
func (t *Topology) Names() []string { return append([]string(nil), t.names...) }

// Do runs fn on an OS thread switched into namespace ns ("" runs it
// here): sockets fn opens belong to ns and may be used from any goroutine
// afterwards. If switching back fails the thread is left locked, so the Go
// runtime discards it instead of reusing it in the wrong namespace.
func Do(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back from %s: %w", ns, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Exec is the command prefix that runs a program in namespace ns
// ("ip netns exec ns"; nothing for ""). ip execs the program, so the PID
// is the program's.
func Exec(ns string) []string {
	if ns == "" {
		return nil
	}
	return []string{"ip", "netns", "exec", ns}
}

// Steer makes the server namespace's interfaces (the veths' server ends)
// hand received packets to the CPUs in cpus (a list such as "1" or "0,1")
// by RPS, a per-device setting of that namespace. A veth receives on the
// CPU that sent, so without it the server's softirq work (the whole
// offloaded relay) would run on the generator's CPU, outside a server
// pinned to cpus. Loopback topologies are left alone.
func (t *Topology) Steer(cpus string) error {
	if t.Kind != "veth" {
		return nil
	}
	var mask uint64
	for _, f := range strings.Split(cpus, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 63 {
			return fmt.Errorf("netns: CPU list %q: want numbers 0-63 separated by commas", cpus)
		}
		mask |= 1 << n
	}
	for _, dev := range []string{"tobsc", "tobsp"} {
		path := "/sys/class/net/" + dev + "/queues/rx-0/rps_cpus"
		cmd := exec.Command("ip", "netns", "exec", t.Server, "sh", "-c", fmt.Sprintf("echo %x > %s", mask, path))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("netns: RPS on %s: %v: %s", dev, err, out)
		}
	}
	return nil
}
