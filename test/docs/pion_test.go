package docs

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestPionAgainstMakeRunConfig: the pion/turn client relays through a ternd
// serving make run's config (deploy/examples/local.yaml, no extra flag)
// to an echo peer on 127.0.0.1 and loses nothing, over Send indications
// first and then the channel it binds (pion numbers channels up from
// 0x4000). The README's "Try it" block does the same with coturn's
// turnutils_uclient in channel mode; together they are issue 20's check
// that the default config serves both clients.
func TestPionAgainstMakeRunConfig(t *testing.T) {
	startTernd(t, testenv.Ternd(t), "deploy/examples/local.yaml")

	peer, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := peer.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = peer.WriteTo(buf[:n], from)
		}
	}()

	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var log testenv.LockedBuffer
	client, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: "127.0.0.1:3478", TURNServerAddr: "127.0.0.1:3478",
		Username: "user", Password: "pass", Realm: "stunner.l7mp.io", Conn: conn,
		LoggerFactory: &logging.DefaultLoggerFactory{Writer: &log, DefaultLogLevel: logging.LogLevelDebug},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := client.Allocate()
	if err != nil {
		t.Fatalf("Allocate: %v\n%s", err, log.String())
	}
	defer relay.Close()

	// Round trips one at a time: a lost packet is a read that times out,
	// not a guess about timing. pion binds the channel in the background
	// after the first write, so later packets travel as ChannelData.
	const n = 100
	buf := make([]byte, 1500)
	for i := range n {
		msg := []byte(fmt.Sprintf("packet %03d", i))
		if _, err := relay.WriteTo(msg, peer.LocalAddr()); err != nil {
			t.Fatalf("packet %d: write: %v", i, err)
		}
		if err := relay.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		got, from, err := relay.ReadFrom(buf)
		if err != nil {
			t.Fatalf("packet %d of %d lost: %v\n%s", i, n, err, log.String())
		}
		if !bytes.Equal(buf[:got], msg) || from.String() != peer.LocalAddr().String() {
			t.Fatalf("packet %d: got %q from %v, want %q from %v", i, buf[:got], from, msg, peer.LocalAddr())
		}
	}
	// pion logs its ChannelBind's outcome at debug level only.
	if l := log.String(); !strings.Contains(l, "Channel binding successful") {
		t.Errorf("pion never bound a channel, so only Send indications were tested:\n%s", l)
	}
}
