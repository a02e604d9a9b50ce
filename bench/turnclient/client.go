package turnclient

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pion/stun/v2"
)

// Credentials are static long-term credentials (RFC 8489 §9.2).
type Credentials struct {
	Username, Password string
}

// Client drives one TURN allocation from one UDP socket. It is not safe
// for concurrent use, and it reads from the socket only while a request is
// outstanding.
type Client struct {
	conn    *net.UDPConn
	tr      Transport // instead of conn and server, when set
	server  netip.AddrPort
	creds   Credentials
	realm   string
	nonce   string
	relayed netip.AddrPort

	// tried are the servers an Allocate was sent to, which a 300 Try
	// Alternate may not send the client back to (RFC 8489 §10).
	tried map[netip.AddrPort]bool

	// Timeout is the wait for a response before a retransmission; it
	// doubles on each retry (RFC 8489 §6.2.1), up to Retries sends.
	Timeout time.Duration
	Retries int

	// Resends counts the requests sent again after a Timeout ran out.
	// A server may receive each of them as a datagram of its own, as late
	// as it likes, and its listener counters count it then.
	Resends int

	buf []byte
}

// New returns a client that talks to server over conn.
func New(conn *net.UDPConn, server netip.AddrPort, creds Credentials) *Client {
	return &Client{conn: conn, server: server, creds: creds,
		Timeout: 250 * time.Millisecond, Retries: 4, buf: make([]byte, 1500)}
}

// NewOver returns a client that talks to its server over tr, any of the
// client transports. Over a stream (TCP, TLS) requests are sent once and
// the wait for the response is Timeout·2^(Retries-1) in all, since a
// reliable transport must not retransmit (RFC 8489 §6.2.2).
func NewOver(tr Transport, creds Credentials) *Client {
	return &Client{tr: tr, creds: creds, Timeout: 250 * time.Millisecond, Retries: 4, buf: make([]byte, 1500)}
}

// Relayed is the XOR-RELAYED-ADDRESS of the last successful Allocate.
func (c *Client) Relayed() netip.AddrPort { return c.relayed }

// Realm and Nonce are what the server sent in its last 401 or 438.
func (c *Client) Realm() string { return c.realm }

// Nonce is the current NONCE.
func (c *Client) Nonce() string { return c.nonce }

// SetAuth presets REALM and NONCE (e.g. to refresh an allocation made from
// an earlier socket on the same address) so the first request is signed.
func (c *Client) SetAuth(realm, nonce string) { c.realm, c.nonce = realm, nonce }

// Server is the server the client talks to: the one it was made for, or
// the alternate a 300 Try Alternate sent it to. Zero for a client made by
// NewOver.
func (c *Client) Server() netip.AddrPort { return c.server }

// ErrorResponse is a TURN error response, e.g. 508 Insufficient Capacity.
type ErrorResponse struct {
	Method stun.Method
	Code   stun.ErrorCode
	Reason string
	// Alternate is the first ALTERNATE-SERVER of a 300 Try Alternate that
	// the client did not follow: one it had tried already (RFC 8489 §10's
	// loop rule), or any over NewOver's transport, which the client cannot
	// redial (the caller may, over the same transport protocol).
	Alternate netip.AddrPort
}

func (e *ErrorResponse) Error() string {
	return fmt.Sprintf("%v: error %d %s", e.Method, e.Code, e.Reason)
}

// ErrTimeout means no response came after every retransmission.
var ErrTimeout = errors.New("turnclient: no response")

// Allocate requests a UDP relay with the given lifetime (0: the server's
// default), answering the 401 challenge with the credentials.
func (c *Client) Allocate(lifetimeSec uint32) (netip.AddrPort, error) {
	extra := []stun.Setter{requestedUDP()}
	if lifetimeSec > 0 {
		extra = append(extra, lifetime(lifetimeSec))
	}
	res, err := c.do(stun.MethodAllocate, extra...)
	if err != nil {
		return netip.AddrPort{}, err
	}
	var xr stun.XORMappedAddress
	if err := xr.GetFromAs(res, stun.AttrXORRelayedAddress); err != nil {
		return netip.AddrPort{}, fmt.Errorf("allocate: %w", err)
	}
	ip, _ := netip.AddrFromSlice(xr.IP)
	c.relayed = netip.AddrPortFrom(ip.Unmap(), uint16(xr.Port))
	return c.relayed, nil
}

// AllocateWith is Allocate with extra request attributes (RequestedFamily,
// AdditionalFamilyIPv6) and returns every XOR-RELAYED-ADDRESS of the
// response, in order: two for a dual allocation (RFC 8656 §7.2). Relayed
// becomes the first.
func (c *Client) AllocateWith(lifetimeSec uint32, attrs ...stun.Setter) ([]netip.AddrPort, error) {
	extra := append([]stun.Setter{requestedUDP()}, attrs...)
	if lifetimeSec > 0 {
		extra = append(extra, lifetime(lifetimeSec))
	}
	res, err := c.do(stun.MethodAllocate, extra...)
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, a := range res.Attributes {
		if a.Type != stun.AttrXORRelayedAddress {
			continue
		}
		one := &stun.Message{TransactionID: res.TransactionID}
		one.Add(stun.AttrXORRelayedAddress, a.Value)
		var xr stun.XORMappedAddress
		if err := xr.GetFromAs(one, stun.AttrXORRelayedAddress); err != nil {
			return nil, fmt.Errorf("allocate: %w", err)
		}
		ip, _ := netip.AddrFromSlice(xr.IP)
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(xr.Port)))
	}
	if len(out) == 0 {
		return nil, errors.New("allocate: no XOR-RELAYED-ADDRESS")
	}
	c.relayed = out[0]
	return out, nil
}

// Refresh sets the allocation's lifetime; 0 deletes it (RFC 8656 §8).
func (c *Client) Refresh(lifetimeSec uint32) error {
	_, err := c.do(stun.MethodRefresh, lifetime(lifetimeSec))
	return err
}

// CreatePermission installs a permission for peer's IP.
func (c *Client) CreatePermission(peer netip.AddrPort) error {
	_, err := c.do(stun.MethodCreatePermission, peerAddr(peer))
	return err
}

// CreatePermissions installs permissions for the IPs of all peers in one
// CreatePermission request (several XOR-PEER-ADDRESS attributes, RFC 8656
// §9.1), which the server installs all or none of.
func (c *Client) CreatePermissions(peers ...netip.AddrPort) error {
	attrs := make([]stun.Setter, len(peers))
	for i, p := range peers {
		attrs[i] = peerAddr(p)
	}
	_, err := c.do(stun.MethodCreatePermission, attrs...)
	return err
}

// ChannelBind binds channel ch (0x4000-0x7FFF; ternd with
// --strict-channel-numbers takes 0x4000-0x4FFF) to peer, which also installs
// a permission for peer's IP.
func (c *Client) ChannelBind(peer netip.AddrPort, ch uint16) error {
	_, err := c.do(stun.MethodChannelBind, channelNumber(ch), peerAddr(peer))
	return err
}

func peerAddr(p netip.AddrPort) stun.Setter {
	return setterFunc(func(m *stun.Message) error {
		a := stun.XORMappedAddress{IP: p.Addr().AsSlice(), Port: int(p.Port())}
		return a.AddToAs(m, stun.AttrXORPeerAddress)
	})
}

type setterFunc func(*stun.Message) error

func (f setterFunc) AddTo(m *stun.Message) error { return f(m) }

// maxRedirects bounds the servers one client tries: every redirect goes to
// a server not tried before, and this bounds a chain of servers that each
// name a new one.
const maxRedirects = 8

// do runs one request, signing it once the realm and nonce are known and
// answering a 401 or 438 by signing (again) with the nonce it carries.
// An Allocate answered with 300 Try Alternate is sent again to the
// ALTERNATE-SERVER, with the same credentials and no nonce (the
// alternate's 401 gives its own), unless the client has sent the Allocate
// to that server before (RFC 8489 §10) or talks over a NewOver transport.
func (c *Client) do(method stun.Method, extra ...stun.Setter) (*stun.Message, error) {
	if method == stun.MethodAllocate && c.tr == nil {
		if c.tried == nil {
			c.tried = map[netip.AddrPort]bool{}
		}
		c.tried[c.server] = true
	}
	for attempt := 0; attempt < 3; attempt++ {
		setters := []stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}
		setters = append(setters, extra...)
		if c.nonce != "" {
			setters = append(setters,
				stun.NewUsername(c.creds.Username), stun.NewRealm(c.realm), stun.NewNonce(c.nonce),
				stun.NewLongTermIntegrity(c.creds.Username, c.realm, c.creds.Password))
		}
		setters = append(setters, stun.Fingerprint)
		req, err := stun.Build(setters...)
		if err != nil {
			return nil, err
		}
		res, err := c.roundTrip(req)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", method, err)
		}
		if res.Type.Class == stun.ClassSuccessResponse {
			return res, nil
		}
		var ec stun.ErrorCodeAttribute
		if err := ec.GetFrom(res); err != nil {
			return nil, fmt.Errorf("%v: error response without ERROR-CODE", method)
		}
		if ec.Code == stun.CodeUnauthorized || ec.Code == stun.CodeStaleNonce {
			var realm stun.Realm
			var nonce stun.Nonce
			if err := nonce.GetFrom(res); err != nil {
				return nil, fmt.Errorf("%v: %d without NONCE", method, ec.Code)
			}
			if realm.GetFrom(res) == nil {
				c.realm = realm.String()
			}
			signed := c.nonce != ""
			c.nonce = nonce.String()
			if ec.Code == stun.CodeUnauthorized && signed && attempt > 0 {
				return nil, &ErrorResponse{Method: method, Code: ec.Code, Reason: string(ec.Reason)}
			}
			continue
		}
		if ec.Code == stun.CodeTryAlternate && method == stun.MethodAllocate {
			var as stun.AlternateServer
			if err := as.GetFrom(res); err != nil {
				return nil, fmt.Errorf("%v: 300 without ALTERNATE-SERVER", method)
			}
			ip, _ := netip.AddrFromSlice(as.IP)
			alt := netip.AddrPortFrom(ip.Unmap(), uint16(as.Port))
			if c.tr != nil || c.tried[alt] || len(c.tried) > maxRedirects {
				return nil, &ErrorResponse{method, ec.Code, string(ec.Reason), alt}
			}
			c.tried[alt] = true
			c.server, c.nonce = alt, ""
			attempt = -1 // a new server: authentication starts over
			continue
		}
		return nil, &ErrorResponse{Method: method, Code: ec.Code, Reason: string(ec.Reason)}
	}
	return nil, fmt.Errorf("%v: too many authentication rounds", method)
}

// roundTrip sends req and waits for the response with its transaction ID,
// retransmitting with a doubling timeout. Other datagrams are dropped.
func (c *Client) roundTrip(req *stun.Message) (*stun.Message, error) {
	timeout := c.Timeout
	retries := c.Retries
	if c.tr != nil && c.tr.Stream() {
		timeout <<= max(retries-1, 0)
		retries = 1
	}
	defer c.setReadDeadline(time.Time{})
	for try := 0; try < retries; try++ {
		if try > 0 {
			c.Resends++
		}
		if err := c.write(req.Raw); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(timeout)
		_ = c.setReadDeadline(deadline)
		for {
			n, err := c.read(c.buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return nil, err
			}
			if !stun.IsMessage(c.buf[:n]) {
				continue
			}
			res := &stun.Message{Raw: append([]byte(nil), c.buf[:n]...)}
			if res.Decode() != nil || res.TransactionID != req.TransactionID {
				continue
			}
			return res, nil
		}
		timeout *= 2
	}
	return nil, ErrTimeout
}

func (c *Client) write(b []byte) error {
	if c.tr != nil {
		return c.tr.WriteMsg(b)
	}
	_, err := c.conn.WriteToUDPAddrPort(b, c.server)
	return err
}

func (c *Client) read(b []byte) (int, error) {
	if c.tr != nil {
		return c.tr.ReadMsg(b)
	}
	n, _, err := c.conn.ReadFromUDPAddrPort(b)
	return n, err
}

func (c *Client) setReadDeadline(t time.Time) error {
	if c.tr != nil {
		return c.tr.SetReadDeadline(t)
	}
	return c.conn.SetReadDeadline(t)
}
