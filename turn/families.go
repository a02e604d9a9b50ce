package turn

import (
	"github.com/pion/stun/v2"
)

// Attributes of RFC 8656 that pion/stun v2 does not name. Both are
// comprehension-optional (0x8000-0xFFFF), so a server that does not know
// them ignores them, and an old client ignores ADDRESS-ERROR-CODE.
const (
	// attrAdditionalAddressFamily asks for an IPv6 relayed transport
	// address besides the IPv4 one (RFC 8656 §18.11).
	attrAdditionalAddressFamily stun.AttrType = 0x8000
	// attrAddressErrorCode says why the relayed transport address of a
	// family could not be allocated in a dual allocation (RFC 8656 §18.12).
	attrAddressErrorCode stun.AttrType = 0x8001
	// The code points of the TURNbis drafts before RFC 8656, which coturn
	// still uses: turnutils_uclient -Z sends ADDITIONAL-ADDRESS-FAMILY as
	// 0x8032 and reads ADDRESS-ERROR-CODE as 0x8033. Both are accepted;
	// a client that asked with the draft's gets the draft's answer.
	attrAdditionalAddressFamilyDraft stun.AttrType = 0x8032
	attrAddressErrorCodeDraft        stun.AttrType = 0x8033
)

// additionalFamily returns the value of ADDITIONAL-ADDRESS-FAMILY in m,
// under RFC 8656's code point or the drafts', and whether it is there.
func additionalFamily(m *stun.Message) ([]byte, bool) {
	if v, err := m.Get(attrAdditionalAddressFamily); err == nil {
		return v, true
	}
	if v, err := m.Get(attrAdditionalAddressFamilyDraft); err == nil {
		return v, true
	}
	return nil, false
}

// addressFamilies reads REQUESTED-ADDRESS-FAMILY and
// ADDITIONAL-ADDRESS-FAMILY (RFC 8656 §7.2 steps 4-7) into rr, and reports
// whether an additional IPv6 relayed transport address is asked for, or
// the error response when the request is refused: 400 for both attributes,
// a malformed value or an ADDITIONAL-ADDRESS-FAMILY of IPv4, 440 for an
// unknown family. With neither, rr.Default lets the allocator fall back
// to IPv6 when it has no IPv4 relay address.
func (q *req) addressFamilies(rr *RelayRequest) (bool, []byte) {
	rv, rerr := q.m.Get(stun.AttrRequestedAddressFamily)
	av, additional := additionalFamily(q.m)
	switch {
	case rerr == nil && additional:
		return false, q.fail(stun.CodeBadRequest, nil)
	case rerr == nil:
		switch {
		case len(rv) < 1:
			return false, q.fail(stun.CodeBadRequest, nil)
		case rv[0] == familyIPv6:
			rr.IPv6 = true
		case rv[0] != familyIPv4:
			return false, q.fail(stun.CodeAddrFamilyNotSupported, nil)
		}
		return false, nil
	case additional:
		switch {
		case len(av) < 1 || av[0] == familyIPv4:
			return false, q.fail(stun.CodeBadRequest, nil)
		case av[0] != familyIPv6:
			return false, q.fail(stun.CodeAddrFamilyNotSupported, nil)
		}
		return true, nil
	}
	rr.Default = true
	return false, nil
}

// addressErrorCode encodes ADDRESS-ERROR-CODE (RFC 8656 §18.12): the
// family, a reserved byte, the error class and number, no reason phrase;
// under the drafts' code point when draft is set.
type addressErrorCode struct {
	family byte
	code   stun.ErrorCode
	draft  bool
}

// AddTo implements stun.Setter.
func (c addressErrorCode) AddTo(m *stun.Message) error {
	t := attrAddressErrorCode
	if c.draft {
		t = attrAddressErrorCodeDraft
	}
	m.Add(t, []byte{c.family, 0, byte(c.code / 100), byte(c.code % 100)})
	return nil
}
