package turnclient

import (
	"encoding/binary"
	"net/netip"

	"github.com/pion/stun/v2"
)

// ChannelData builds a ChannelData message (RFC 8656 §12.4): a 4-byte
// header (channel, length) followed by p. Over UDP no padding is needed.
// The payload starts at offset 4.
func ChannelData(ch uint16, p []byte) []byte {
	b := make([]byte, 4+len(p))
	binary.BigEndian.PutUint16(b[0:], ch)
	binary.BigEndian.PutUint16(b[2:], uint16(len(p)))
	copy(b[4:], p)
	return b
}

// SendIndication builds a Send indication (RFC 8656 §11.3) carrying p to
// peer, and returns it with the offset of p inside it, so that the caller
// can stamp sequence numbers into the payload in place. It carries no
// FINGERPRINT, so such edits keep it valid.
func SendIndication(peer netip.AddrPort, p []byte) (frame []byte, payloadAt int, err error) {
	m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
		peerAddr(peer), data(p))
	if err != nil {
		return nil, 0, err
	}
	pad := (4 - len(p)%4) % 4
	return m.Raw, len(m.Raw) - pad - len(p), nil
}

// Payload returns the application payload of a datagram a TURN server
// sent a client: the body of a ChannelData message or the DATA of a Data
// indication. ok is false for anything else (e.g. a stray response).
func Payload(b []byte) (p []byte, ok bool) {
	if len(b) >= 4 && b[0]&0xC0 == 0x40 {
		n := int(binary.BigEndian.Uint16(b[2:]))
		if 4+n > len(b) {
			return nil, false
		}
		return b[4 : 4+n], true
	}
	if !stun.IsMessage(b) {
		return nil, false
	}
	m := &stun.Message{Raw: b}
	if m.Decode() != nil || m.Type != stun.NewType(stun.MethodData, stun.ClassIndication) {
		return nil, false
	}
	v, err := m.Get(stun.AttrData)
	if err != nil {
		return nil, false
	}
	return v, true
}
