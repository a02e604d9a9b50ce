// Command dtlsflood sends datagrams to a TURN-DTLS listener, each from a
// UDP socket of its own (so from a new source port), at about -rate per
// second: 14-byte datagrams starting with 22 (a DTLS handshake record's
// content type), or with -hello DTLS 1.2 ClientHellos without a cookie.
// It is the flood of issue 22, item 4, from real sockets on loopback
// (docs/security.md, "DTLS before the cookie"); watch ternd's RSS and its
// go_goroutines and tern_listener_connections metrics meanwhile.
//
//	go run ./bench/dtlsflood -addr 127.0.0.1:3479 -n 10000 -rate 2300 [-hello]
//
// It prints how many datagrams it sent, in how long, and how many answers
// it saw (each socket waits 1 ms for one before it is closed).
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

// hello is a cookieless ClientHello whose random carries i: one cipher
// suite, the null compression, extended_master_secret.
func hello(i int) []byte {
	var body []byte
	body = append(body, 0xfe, 0xfd)
	body = binary.BigEndian.AppendUint32(body, uint32(i))
	body = append(body, make([]byte, 28)...)
	body = append(body, 0, 0, 0, 2, 0xc0, 0x2b, 1, 0, 0, 4, 0x00, 0x17, 0x00, 0)
	n := len(body)
	d := []byte{22, 0xfe, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}
	d = binary.BigEndian.AppendUint16(d, uint16(12+n))
	d = append(d, 1, 0, byte(n>>8), byte(n), 0, 0, 0, 0, 0, 0, byte(n>>8), byte(n))
	return append(d, body...)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:3479", "the TURN-DTLS listener, host:port")
	n := flag.Int("n", 10000, "datagrams to send (one socket each)")
	rate := flag.Int("rate", 2300, "datagrams per second, at most")
	withHello := flag.Bool("hello", false, "send cookieless ClientHellos instead of 14-byte garbage")
	flag.Parse()
	ra, err := net.ResolveUDPAddr("udp", *addr)
	if err != nil || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "dtlsflood: -addr:", err, "-rate must be positive")
		os.Exit(2)
	}
	start := time.Now()
	answers := 0
	var open []*net.UDPConn
	drain := func() {
		buf := make([]byte, 2048)
		for _, c := range open {
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(buf); err == nil {
				answers++
			}
			c.Close()
		}
		open = open[:0]
	}
	for i := 0; i < *n; i++ {
		c, err := net.DialUDP("udp", nil, ra)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dtlsflood:", err)
			os.Exit(1)
		}
		d := append([]byte{22}, make([]byte, 13)...)
		binary.BigEndian.PutUint32(d[1:], uint32(i))
		if *withHello {
			d = hello(i)
		}
		_, _ = c.Write(d)
		if open = append(open, c); len(open) == 200 {
			drain()
		}
		if d := time.Until(start.Add(time.Duration(i+1) * time.Second / time.Duration(*rate))); d > 0 {
			time.Sleep(d)
		}
	}
	drain()
	fmt.Printf("sent %d in %v, %d answers seen\n", *n, time.Since(start).Round(time.Millisecond), answers)
}
