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
)

// addressFamilies reads REQUESTED-ADDRESS-FAMILY and
// ADDITIONAL-ADDRESS-FAMILY (RFC 8656 §7.2 steps 4-7) into rr, and reports
// whether an additional IPv6 relayed transport address is asked for, or
// the error response when the request is refused: 400 for both attributes,
// a malformed value or an ADDITIONAL-ADDRESS-FAMILY of IPv4, 440 for an
// unknown family. With neither, rr.Default lets the allocator fall back
// to IPv6 when it has no IPv4 relay address.
func (q *req) addressFamilies(rr *RelayRequest) (bool, []byte) {
	rv, rerr := q.m.Get(stun.AttrRequestedAddressFamily)
	av, aerr := q.m.Get(attrAdditionalAddressFamily)
	switch {
	case rerr == nil && aerr == nil:
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
	case aerr == nil:
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
// family, a reserved byte, the error class and number, no reason phrase.
type addressErrorCode struct {
	family byte
	code   stun.ErrorCode
}

// AddTo implements stun.Setter.
func (c addressErrorCode) AddTo(m *stun.Message) error {
	m.Add(attrAddressErrorCode, []byte{c.family, 0, byte(c.code / 100), byte(c.code % 100)})
	return nil
}
