package offload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// These tests run the programs on packets given to BPF_PROG_TEST_RUN
// inside a fresh namespace whose lo carries 127.0.0.0/8: every path's
// destination is local there, so a relayed packet comes back rewritten
// with TC_ACT_OK / XDP_PASS and can be compared byte for byte.

const (
	runClient   = "127.0.0.2:29001"
	runListener = "127.0.0.1:29100"
	runRelay    = "127.0.0.3:29200"
	runPeer     = "127.0.0.4:29002"

	runClient6   = "[fd00::2]:29001"
	runListener6 = "[fd00::1]:29100"
	runRelay6    = "[fd00::3]:29200"
	runPeer6     = "[fd00::4]:29002"
)

// frame builds an Ethernet/IP/UDP frame with a valid UDP checksum, IPv6
// where the addresses are.
func frame(src, dst string, payload []byte) []byte {
	s, d := netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst)
	if s.Addr().Is6() {
		return frame6(s, d, payload)
	}
	b := make([]byte, 14, 14+28+len(payload))
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	sa, da := s.Addr().As4(), d.Addr().As4()
	copy(ip[12:], sa[:])
	copy(ip[16:], da[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(ip, 0)))
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], s.Port())
	binary.BigEndian.PutUint16(udp[2:], d.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	c := ^fold(sum16(udp, sum16(ip[12:20], 0)+unix.IPPROTO_UDP+uint32(len(udp))))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	b = append(b, ip...)
	return append(b, udp...)
}

func frame6(s, d netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 14, 14+48+len(payload))
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IPV6)
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, unix.IPPROTO_UDP, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
	sa, da := s.Addr().As16(), d.Addr().As16()
	copy(ip[8:], sa[:])
	copy(ip[24:], da[:])
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], s.Port())
	binary.BigEndian.PutUint16(udp[2:], d.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	c := ^fold(sum16(udp, sum16(ip[8:40], 0)+unix.IPPROTO_UDP+uint32(len(udp))))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	b = append(b, ip...)
	return append(b, udp...)
}

// runner holds the programs and maps loaded in a namespace of its own.
type runner struct {
	o  *Offload
	ns string
}

func newRunner(t testing.TB) *runner {
	requireRoot(t)
	ns := newNetns(t, uniq()+"r")
	run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1")
	run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1")
	for i := 1; i <= 4; i++ {
		run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("fd00::%d/128", i), "dev", "lo", "nodad")
	}
	o := openIn(t, ns, Config{Mode: TC, Interfaces: []string{"lo"}})
	for _, a := range [][4]string{{runClient, runListener, runRelay, runPeer}, {runClient6, runListener6, runRelay6, runPeer6}} {
		p := Path{
			Client: netip.MustParseAddrPort(a[0]), Listener: netip.MustParseAddrPort(a[1]),
			Relay: netip.MustParseAddrPort(a[2]), Peer: netip.MustParseAddrPort(a[3]),
			Channel: 0x4001, Expires: time.Now().Add(time.Hour), Counter: 1,
		}
		if err := o.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	return &runner{o: o, ns: ns}
}

// skbCtx is struct __sk_buff with ingress_ifindex (offset 36) and
// ifindex (40) set to lo's 1; the kernel wants the rest zero.
type skbCtx [192]byte

// xdpCtx is struct xdp_md: data, data_end, data_meta, ingress_ifindex,
// rx_queue_index, egress_ifindex.
type xdpCtx struct{ Data, DataEnd, DataMeta, IngressIfindex, RxQueue, EgressIfindex uint32 }

// run runs hook's program on in and returns its verdict and output.
func (r *runner) run(t testing.TB, hook Mode, in []byte) (uint32, []byte) {
	t.Helper()
	var (
		ret uint32
		out []byte
		err error
	)
	if ierr := inNetns(t, r.ns, func() error {
		ret, out, err = r.runHere(hook, in)
		return nil
	}); ierr != nil {
		t.Fatal(ierr)
	}
	if err != nil {
		t.Fatalf("run %s: %v", hook, err)
	}
	return ret, out
}

// runHere is run on a thread already in r.ns.
func (r *runner) runHere(hook Mode, in []byte) (uint32, []byte, error) {
	out := make([]byte, len(in)+256)
	opts := ebpf.RunOptions{Data: in, DataOut: out}
	prog := r.o.objs.TernTc
	if hook == XDP {
		prog = r.o.objs.TernXdp
		opts.Context = xdpCtx{DataEnd: uint32(len(in)), IngressIfindex: 1}
	} else {
		var c skbCtx
		binary.NativeEndian.PutUint32(c[36:], 1)
		binary.NativeEndian.PutUint32(c[40:], 1)
		opts.Context = c
	}
	ret, err := prog.Run(&opts)
	return ret, opts.DataOut, err
}

// The verdicts the programs return (linux/pkt_cls.h, linux/bpf.h).
const (
	tcActOK     = 0
	tcActShot   = 2
	tcRedirect  = 7
	xdpDrop     = 1
	xdpPASS     = 2
	xdpRedirect = 4
)

func pass(hook Mode) uint32 {
	if hook == XDP {
		return xdpPASS
	}
	return tcActOK
}

// TestProgramRewrite compares both programs' output with the frame the
// socket path would send, for both directions and lengths 0-1400.
func TestProgramRewrite(t *testing.T) {
	r := newRunner(t)
	for _, c := range []struct {
		hook                          Mode
		client, listener, relay, peer string
	}{
		{TC, runClient, runListener, runRelay, runPeer},
		{XDP, runClient, runListener, runRelay, runPeer},
		{TC, runClient6, runListener6, runRelay6, runPeer6},
		{XDP, runClient6, runListener6, runRelay6, runPeer6},
	} {
		hook, runClient, runListener, runRelay, runPeer := c.hook, c.client, c.listener, c.relay, c.peer
		for _, n := range []int{0, 1, 2, 3, 7, 100, 1001, 1400} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*13 + n)
			}
			in := frame(runClient, runListener, channelData(0x4001, payload, (4-n%4)%4))
			want := frame(runRelay, runPeer, payload)
			ret, out := r.run(t, hook, in)
			if ret != pass(hook) || !bytes.Equal(out[14:], want[14:]) {
				t.Errorf("%s c2p %d bytes: verdict %d\n got %x\nwant %x", hook, n, ret, out, want)
			}
			in = frame(runPeer, runRelay, payload)
			want = frame(runListener, runClient, channelData(0x4001, payload, 0))
			ret, out = r.run(t, hook, in)
			if ret != pass(hook) || !bytes.Equal(out[14:], want[14:]) {
				t.Errorf("%s p2c %d bytes: verdict %d\n got %x\nwant %x", hook, n, ret, out, want)
			}
		}
	}
}

// FuzzPrograms runs both programs on arbitrary IPv4 packets (after an
// Ethernet header) with one path installed: they must pass every packet
// (all destinations are local in the runner's namespace, so even a
// relayed one passes), and a packet they rewrite must keep consistent
// lengths and stay as valid as it came: right checksums in, right out.
func FuzzPrograms(f *testing.F) {
	for _, s := range [][]byte{
		frame(runClient, runListener, channelData(0x4001, []byte("hello"), 3))[14:],
		frame(runPeer, runRelay, []byte("world"))[14:],
		frame(runClient, runListener, channelData(0x4001, []byte("long"), 12))[14:],
		frame(runClient, runListener, channelData(0x4001, []byte("short"), 0)[:6])[14:],
		frame(runClient, runListener, stunBinding)[14:],
	} {
		f.Add(s)
	}
	for _, s := range [][]byte{
		frame(runClient6, runListener6, channelData(0x4001, []byte("hello"), 3))[14:],
		frame(runPeer6, runRelay6, []byte("world"))[14:],
	} {
		f.Add(s)
	}
	r := newRunner(f)
	f.Fuzz(func(t *testing.T, ip []byte) {
		if len(ip) < 20 || len(ip) > 3000 {
			// BPF_PROG_TEST_RUN itself refuses (EINVAL) an IPv4 skb
			// shorter than an IPv4 header or longer than a page less
			// its head- and tailroom.
			return
		}
		// The version nibble picks the EtherType, so that both
		// families' parsers see what the fuzzer makes.
		in := append(make([]byte, 12, 14+len(ip)), 0x08, 0x00)
		if ip[0]>>4 == 6 {
			if len(ip) < 40 {
				return
			}
			in[13] = 0xdd
			in[12] = 0x86
		}
		in = append(in, ip...)
		for _, hook := range []Mode{TC, XDP} {
			ret, out := r.run(t, hook, in)
			if ret != pass(hook) {
				t.Fatalf("%s verdict %d for %x", hook, ret, in)
			}
			if bytes.Equal(out, in) {
				continue
			}
			if err := checkUDP(out[14:]); err != nil {
				// Only what came in broken may leave broken.
				if checkUDP(trimmed(ip)) == nil {
					t.Fatalf("%s rewrote %x\ninto %x: %v", hook, in, out, err)
				}
			}
		}
	})
}

// trimmed returns ip cut to the length its header claims, as the
// receiving stack would read it.
func trimmed(ip []byte) []byte {
	var n int
	if ip[0]>>4 == 6 {
		n = 40 + int(binary.BigEndian.Uint16(ip[4:6]))
	} else {
		n = int(binary.BigEndian.Uint16(ip[2:4]))
	}
	return ip[:max(0, min(n, len(ip)))]
}

// TestProgramPasses gives both programs packets that match the installed
// path's addresses but must go to the socket path, and checks that they
// come back unchanged with TC_ACT_OK / XDP_PASS and are counted where a
// reason applies.
func TestProgramPasses(t *testing.T) {
	r := newRunner(t)
	cd := channelData(0x4001, []byte("payload!"), 0)
	withIP := func(b []byte, edit func(ip []byte)) []byte {
		edit(b[14:])
		return b
	}
	options := func() []byte { // ihl 6: one 4-byte option (NOPs + EOL)
		b := frame(runClient, runListener, cd)
		b = append(b[:34:34], append([]byte{1, 1, 1, 0}, b[34:]...)...)
		b[14] = 0x46
		binary.BigEndian.PutUint16(b[16:], uint16(len(b)-14))
		return b
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"STUN", frame(runClient, runListener, stunBinding)},
		{"unbound channel", frame(runClient, runListener, channelData(0x4002, []byte("x"), 3))},
		{"other client", frame("127.0.0.9:29001", runListener, cd)},
		{"peer without path", frame("127.0.0.4:29009", runRelay, []byte("x"))},
		{"length over datagram", frame(runClient, runListener, cd[:len(cd)-1])},
		{"4 padding bytes", frame(runClient, runListener, channelData(0x4001, []byte("x"), 7))},
		{"non-zero padding", frame(runClient, runListener, append(channelData(0x4001, []byte("x"), 0), 0, 1, 0))},
		{"IP options", options()},
		{"more fragments", withIP(frame(runClient, runListener, cd), func(ip []byte) { ip[6] |= 0x20 })},
		{"fragment offset", withIP(frame(runClient, runListener, cd), func(ip []byte) { ip[7] = 1 })},
		{"TCP", withIP(frame(runClient, runListener, cd), func(ip []byte) { ip[9] = unix.IPPROTO_TCP })},
		{"IPv6 hop-by-hop", withIP(frame(runClient6, runListener6, cd), func(ip []byte) { ip[6] = 0 })},
	}
	for _, hook := range []Mode{TC, XDP} {
		before := r.o.Stats()
		for _, c := range cases {
			in := append([]byte(nil), c.in...)
			ret, out := r.run(t, hook, in)
			if ret != pass(hook) || !bytes.Equal(out, c.in) {
				t.Errorf("%s %s: verdict %d, out %x, want it passed unchanged", hook, c.name, ret, out)
			}
		}
		after := r.o.Stats()
		if d := after.BadLength - before.BadLength; d != 1 {
			t.Errorf("%s: BadLength counted %d, want 1", hook, d)
		}
		if d := after.Padding - before.Padding; d != 2 {
			t.Errorf("%s: Padding counted %d, want 2", hook, d)
		}
	}
	var got Counters
	r.o.Counters(func(_ uint32, c Counters) { got = c })
	if got != (Counters{}) {
		t.Errorf("counters %+v after passing everything", got)
	}
}
