package offload

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

var seq atomic.Int32

// run runs a command and fails the test with its output if it fails.
func run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// topo is the client's namespace (10.0.1.2) -- ternd's (listener 10.0.1.1,
// relay 10.0.2.1, forwarding on) -- the peers' (10.0.2.2 permitted,
// 10.0.2.4 in the allowlist without a permission, 10.0.2.3 outside it).
type topo struct {
	client, tern, peer string // namespaces
	ct, pt             string // ternd's ends of the client and peer veths
}

func newTopo(t *testing.T) topo {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "offload end-to-end tests need root (network namespaces, BPF)")
	}
	_, err := exec.LookPath("ip")
	testenv.Require(t, "ip (iproute2)", err)
	u := fmt.Sprintf("oe%d%d", os.Getpid()%10000, seq.Add(1))
	tp := topo{client: u + "c", tern: u + "t", peer: u + "p", ct: u + "ct", pt: u + "pt"}
	for _, ns := range []string{tp.client, tp.tern, tp.peer} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "link", "add", u+"cc", "netns", tp.client, "type", "veth", "peer", "name", u+"ct", "netns", tp.tern)
	run(t, "ip", "link", "add", u+"pp", "netns", tp.peer, "type", "veth", "peer", "name", u+"pt", "netns", tp.tern)
	run(t, "ip", "-n", tp.client, "addr", "add", "10.0.1.2/24", "dev", u+"cc")
	run(t, "ip", "-n", tp.tern, "addr", "add", "10.0.1.1/24", "dev", u+"ct")
	run(t, "ip", "-n", tp.tern, "addr", "add", "10.0.2.1/24", "dev", u+"pt")
	for _, a := range []string{"10.0.2.2/24", "10.0.2.3/24", "10.0.2.4/24"} {
		run(t, "ip", "-n", tp.peer, "addr", "add", a, "dev", u+"pp")
	}
	for _, l := range [][2]string{{tp.client, u + "cc"}, {tp.tern, u + "ct"}, {tp.tern, u + "pt"}, {tp.peer, u + "pp"}} {
		run(t, "ip", "-n", l[0], "link", "set", l[1], "up")
	}
	// The programs' FIB lookups need forwarding on where they run; this is
	// ternd's namespace, not the host.
	run(t, "ip", "netns", "exec", tp.tern, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1")
	return tp
}

// newOneArmTopo is a relay with one interface, as in a pod or on a node
// with a single NIC: ternd's namespace has only the veth ct (10.0.1.1 and
// 10.0.2.1; fd00:1::1 and fd00:2::1) and forwarding off, and the client
// (10.0.1.2, fd00:1::2) and the peers (10.0.2.2-4, fd00:2::2-4) share the
// namespace at its other end, where forwarding is off too. Every packet
// ternd relays leaves by the interface it came in on.
func newOneArmTopo(t *testing.T) topo {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "offload end-to-end tests need root (network namespaces, BPF)")
	}
	_, err := exec.LookPath("ip")
	testenv.Require(t, "ip (iproute2)", err)
	u := fmt.Sprintf("oa%d%d", os.Getpid()%10000, seq.Add(1))
	tp := topo{client: u + "c", tern: u + "t", ct: u + "ct"}
	tp.peer = tp.client
	for _, ns := range []string{tp.client, tp.tern} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// A new namespace may take forwarding from the host's.
		run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=0")
		run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=0")
	}
	run(t, "ip", "link", "add", u+"cc", "netns", tp.client, "type", "veth", "peer", "name", tp.ct, "netns", tp.tern)
	for _, a := range []string{"10.0.1.1/24", "10.0.2.1/24", "fd00:1::1/64", "fd00:2::1/64"} {
		run(t, append([]string{"ip", "-n", tp.tern, "addr", "add", a, "dev", tp.ct}, nodad(a)...)...)
	}
	for _, a := range []string{"10.0.1.2/24", "10.0.2.2/24", "10.0.2.3/24", "10.0.2.4/24", "fd00:1::2/64", "fd00:2::2/64", "fd00:2::3/64", "fd00:2::4/64"} {
		run(t, append([]string{"ip", "-n", tp.client, "addr", "add", a, "dev", u + "cc"}, nodad(a)...)...)
	}
	run(t, "ip", "-n", tp.client, "link", "set", u+"cc", "up")
	run(t, "ip", "-n", tp.tern, "link", "set", tp.ct, "up")
	return tp
}

// nodad is the option that makes an IPv6 address usable at once (no
// duplicate address detection); none for IPv4.
func nodad(addr string) []string {
	if strings.Contains(addr, ":") {
		return []string{"nodad"}
	}
	return nil
}

// inNetns runs fn on an OS thread switched into namespace ns: sockets it
// opens stay there, and can be used from any goroutine after.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked when switching back fails: the thread dies
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// udpIn opens a UDP socket on addr (IPv4, or IPv6 in brackets) in
// namespace ns, closed when t ends.
func udpIn(t *testing.T, ns, addr string) *net.UDPConn {
	t.Helper()
	network := "udp4"
	if strings.HasPrefix(addr, "[") {
		network = "udp6"
	}
	var c *net.UDPConn
	err := inNetns(ns, func() error {
		a, err := net.ResolveUDPAddr(network, addr)
		if err != nil {
			return err
		}
		c, err = net.ListenUDP(network, a)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// httpIn is an HTTP client whose connections are dialed in namespace ns.
func httpIn(ns string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := inNetns(ns, func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
}

// tcIngress is what netlink says of an interface's tc ingress in
// namespace ns: whether it has a clsact qdisc, and its bpf filters' names.
func tcIngress(t *testing.T, ns, ifname string) (clsact bool, filters []string) {
	t.Helper()
	err := inNetns(ns, func() error {
		lnk, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		qs, err := netlink.QdiscList(lnk)
		if err != nil {
			return err
		}
		for _, q := range qs {
			clsact = clsact || q.Type() == "clsact"
		}
		if !clsact {
			return nil
		}
		fs, err := netlink.FilterList(lnk, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok {
				filters = append(filters, bf.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tc ingress of %s in %s: %v", ifname, ns, err)
	}
	return clsact, filters
}

// metrics scrapes url and returns every sample by its line's series text,
// e.g. `tern_offload_packets_total{direction="client_to_peer"}`.
func metrics(t *testing.T, c *http.Client, url string) map[string]float64 {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}
