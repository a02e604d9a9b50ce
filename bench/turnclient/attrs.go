package turnclient

import (
	"encoding/binary"

	"github.com/pion/stun/v2"
)

// attr is a raw TURN attribute; pion/stun/v2 knows the TURN attribute
// types but leaves their encoding to pion/turn, whose codecs are internal.
type attr struct {
	t stun.AttrType
	v []byte
}

func (a attr) AddTo(m *stun.Message) error { m.Add(a.t, a.v); return nil }

// protoUDP is REQUESTED-TRANSPORT's value for UDP (RFC 8656 §18.11).
const protoUDP = 17

func requestedUDP() attr {
	return attr{stun.AttrRequestedTransport, []byte{protoUDP, 0, 0, 0}}
}

// lifetime is LIFETIME in seconds (RFC 8656 §18.4).
func lifetime(seconds uint32) attr {
	return attr{stun.AttrLifetime, binary.BigEndian.AppendUint32(nil, seconds)}
}

// channelNumber is CHANNEL-NUMBER (RFC 8656 §18.1): the number, then RFFU.
func channelNumber(ch uint16) attr {
	return attr{stun.AttrChannelNumber, []byte{byte(ch >> 8), byte(ch), 0, 0}}
}

func data(p []byte) attr { return attr{stun.AttrData, p} }

// RequestedFamily is REQUESTED-ADDRESS-FAMILY (RFC 8656 §18.10): an IPv6
// relayed transport address when v6, else IPv4.
func RequestedFamily(v6 bool) stun.Setter {
	f := byte(1)
	if v6 {
		f = 2
	}
	return attr{stun.AttrRequestedAddressFamily, []byte{f, 0, 0, 0}}
}

// AdditionalFamilyIPv6 is ADDITIONAL-ADDRESS-FAMILY (RFC 8656 §18.11,
// type 0x8000) asking for an IPv6 relayed transport address besides the
// IPv4 one.
func AdditionalFamilyIPv6() stun.Setter { return attr{0x8000, []byte{2, 0, 0, 0}} }
