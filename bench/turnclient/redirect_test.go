package turnclient

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/pion/stun/v2"
)

// redirector is a UDP responder on 127.0.0.1 that answers every Allocate
// with an unauthenticated 300 Try Alternate naming *to, and counts them.
type redirector struct {
	conn *net.UDPConn
	to   atomic.Pointer[netip.AddrPort]
	got  atomic.Int64
}

func startRedirector(t *testing.T) *redirector {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &redirector{conn: c}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
			if m.Decode() != nil || m.Type.Method != stun.MethodAllocate {
				continue
			}
			r.got.Add(1)
			to := *r.to.Load()
			res, err := stun.Build(stun.NewTransactionIDSetter(m.TransactionID),
				stun.NewType(stun.MethodAllocate, stun.ClassErrorResponse), stun.CodeTryAlternate,
				&stun.AlternateServer{IP: to.Addr().AsSlice(), Port: int(to.Port())})
			if err == nil {
				_, _ = c.WriteToUDPAddrPort(res.Raw, from)
			}
		}
	}()
	return r
}

func (r *redirector) addr() netip.AddrPort {
	return netip.MustParseAddrPort(r.conn.LocalAddr().String())
}

// TestRedirectLoop is RFC 8489 §10's loop rule on the client's side: two
// servers that redirect to each other get the Allocate once each, and the
// client stops at the redirect back to the first, reporting it.
func TestRedirectLoop(t *testing.T) {
	a, b := startRedirector(t), startRedirector(t)
	aAddr, bAddr := a.addr(), b.addr()
	a.to.Store(&bAddr)
	b.to.Store(&aAddr)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := New(conn, aAddr, Credentials{"user", "pass"})
	_, err = c.Allocate(0)
	var er *ErrorResponse
	if !errors.As(err, &er) || er.Code != stun.CodeTryAlternate || er.Alternate != aAddr {
		t.Fatalf("Allocate: %v; want the 300 back to %v refused", err, aAddr)
	}
	if c.Server() != bAddr || a.got.Load() != 1 || b.got.Load() != 1 {
		t.Fatalf("client at %v; Allocates seen by A %d, B %d; want B, 1 and 1", c.Server(), a.got.Load(), b.got.Load())
	}
}

// TestRedirectToSelf: a 300 naming the server that sent it is not followed.
func TestRedirectToSelf(t *testing.T) {
	a := startRedirector(t)
	aAddr := a.addr()
	a.to.Store(&aAddr)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := New(conn, aAddr, Credentials{"user", "pass"})
	_, err = c.Allocate(0)
	var er *ErrorResponse
	if !errors.As(err, &er) || er.Code != stun.CodeTryAlternate || a.got.Load() != 1 {
		t.Fatalf("Allocate: %v after %d requests; want one request and the 300 reported", err, a.got.Load())
	}
}
