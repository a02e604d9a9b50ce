package procstat

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestUDPDrops overflows the receive buffer of a UDP socket of the test's own and finds the
// datagrams the kernel dropped counted against the process.
func TestUDPDrops(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.SkipOrFail(t, "/proc/net/udp is Linux's; this is %s", runtime.GOOS)
	}
	before, err := UDPDrops(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	_ = rx.SetReadBuffer(4096) // the kernel's minimum: a few datagrams fill it
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	msg := make([]byte, 1000)
	for range 200 { // nothing reads rx, so all but the first few are dropped
		if _, err := tx.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback delivers in the sender's system call, so the drops are counted by now.
	after, err := UDPDrops(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 100 {
		t.Errorf("drops %d -> %d, want at least 100 more", before, after)
	}
}
