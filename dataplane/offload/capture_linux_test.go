package offload

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setTxChecksum turns a veth's transmit checksum offload on or off (the
// SIOCETHTOOL ETHTOOL_STXCSUM ioctl; ethtool(8) is not installed here).
// With it off, a local sender's datagrams carry a full UDP checksum
// instead of CHECKSUM_PARTIAL's pseudo-header sum, so the checksums the
// programs write can be checked on the wire.
func setTxChecksum(t testing.TB, ns, ifname string, on bool) {
	t.Helper()
	err := inNetns(t, ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		v := struct{ cmd, data uint32 }{0x17 /* ETHTOOL_STXCSUM */, 0}
		if on {
			v.data = 1
		}
		var ifr struct {
			name [unix.IFNAMSIZ]byte
			data uintptr
			_    [16]byte
		}
		copy(ifr.name[:], ifname)
		ifr.data = uintptr(unsafe.Pointer(&v))
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tx checksum %s in %s: %v", ifname, ns, err)
	}
}

// capture is an AF_PACKET socket that sees the IP packets an interface
// receives, before UDP checks their checksums.
type capture struct{ fd int }

func newCapture(t *testing.T, ns, ifname string) *capture {
	t.Helper()
	var c capture
	err := inNetns(t, ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, proto)
		if err != nil {
			return err
		}
		c.fd = fd
		tv := unix.Timeval{Sec: 5}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifc.Index})
	})
	if err != nil {
		t.Fatalf("capture on %s: %v", ifname, err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return &c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// next returns the payload of the next UDP datagram from src, checking
// that its lengths and checksums are right.
func (c *capture) next(t *testing.T, src netip.AddrPort) []byte {
	t.Helper()
	buf := make([]byte, 65536)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		p := buf[:n]
		var from netip.AddrPort
		hl := 20
		switch {
		case len(p) >= 28 && p[0] == 0x45 && p[9] == unix.IPPROTO_UDP:
			from = netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[12:16])), binary.BigEndian.Uint16(p[20:22]))
		case len(p) >= 48 && p[0]>>4 == 6 && p[6] == unix.IPPROTO_UDP:
			hl = 40
			from = netip.AddrPortFrom(netip.AddrFrom16([16]byte(p[8:24])), binary.BigEndian.Uint16(p[40:42]))
		default:
			continue
		}
		if from != src {
			continue
		}
		if err := checkUDP(p); err != nil {
			t.Fatalf("captured %x: %v", p, err)
		}
		return p[hl+8:]
	}
	t.Fatalf("capture: nothing from %v", src)
	return nil
}

func sum16(b []byte, s uint32) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checkUDP verifies an IPv4 or IPv6 UDP packet's lengths and checksums
// (the UDP one must be present).
func checkUDP(p []byte) error {
	if len(p) > 0 && p[0]>>4 == 6 {
		return checkIPv6UDP(p)
	}
	if len(p) < 28 {
		return fmt.Errorf("%d bytes", len(p))
	}
	if int(binary.BigEndian.Uint16(p[2:4])) != len(p) {
		return fmt.Errorf("IP total length %d, packet %d bytes", binary.BigEndian.Uint16(p[2:4]), len(p))
	}
	if fold(sum16(p[:20], 0)) != 0xffff {
		return fmt.Errorf("bad IPv4 header checksum")
	}
	udp := p[20:]
	if int(binary.BigEndian.Uint16(udp[4:6])) != len(udp) {
		return fmt.Errorf("UDP length %d, datagram %d bytes", binary.BigEndian.Uint16(udp[4:6]), len(udp))
	}
	if binary.BigEndian.Uint16(udp[6:8]) == 0 {
		return fmt.Errorf("no UDP checksum")
	}
	s := sum16(p[12:20], 0) + unix.IPPROTO_UDP + uint32(len(udp))
	if fold(sum16(udp, s)) != 0xffff {
		return fmt.Errorf("bad UDP checksum %#04x", binary.BigEndian.Uint16(udp[6:8]))
	}
	return nil
}

func checkIPv6UDP(p []byte) error {
	if len(p) < 48 {
		return fmt.Errorf("%d bytes", len(p))
	}
	if int(binary.BigEndian.Uint16(p[4:6]))+40 != len(p) {
		return fmt.Errorf("IPv6 payload length %d, packet %d bytes", binary.BigEndian.Uint16(p[4:6]), len(p))
	}
	udp := p[40:]
	if int(binary.BigEndian.Uint16(udp[4:6])) != len(udp) {
		return fmt.Errorf("UDP length %d, datagram %d bytes", binary.BigEndian.Uint16(udp[4:6]), len(udp))
	}
	s := sum16(p[8:40], 0) + unix.IPPROTO_UDP + uint32(len(udp))
	if fold(sum16(udp, s)) != 0xffff {
		return fmt.Errorf("bad UDP checksum %#04x", binary.BigEndian.Uint16(udp[6:8]))
	}
	return nil
}
