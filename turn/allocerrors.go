package turn

import (
	"sync/atomic"

	"github.com/pion/stun/v2"
)

// AllocationErrorCodes are the error codes an Allocate can be answered with
// (RFC 8656 §7.2, RFC 8489 §14.8), which Engine.AllocationErrors counts one
// by one; any other code is counted under 0.
var AllocationErrorCodes = [...]int{400, 401, 403, 420, 437, 438, 440, 441, 442, 486, 500, 508}

// allocErrors counts error responses to Allocate by code, one counter per
// entry of AllocationErrorCodes plus one for the rest. It is off the relay
// path: a few atomic adds per refused Allocate.
type allocErrors [len(AllocationErrorCodes) + 1]atomic.Uint64

func allocErrorSlot(code int) int {
	for i, c := range AllocationErrorCodes {
		if c == code {
			return i
		}
	}
	return len(AllocationErrorCodes)
}

// countAllocError counts an error response with code to an Allocate. The
// 401 that answers an Allocate without MESSAGE-INTEGRITY is the first leg
// of every allocation (RFC 8489 §9.2.4: the client learns REALM and NONCE
// from it), not an error, and is not counted.
func (q *req) countAllocError(code stun.ErrorCode) {
	if q.m.Type.Method != stun.MethodAllocate {
		return
	}
	if code == stun.CodeUnauthorized && !q.m.Contains(stun.AttrMessageIntegrity) {
		return
	}
	q.e.allocErrors[allocErrorSlot(int(code))].Add(1)
}

// AllocationErrors returns how many Allocate requests the engine has
// answered with the error code since it started: code is one of
// AllocationErrorCodes, or 0 for every other code. The 401 challenge to an
// unsigned Allocate is not an error and is not counted; Allocate requests
// dropped unanswered (throttled, malformed) are counted as drops instead.
func (e *Engine) AllocationErrors(code int) uint64 {
	if code == 0 {
		return e.allocErrors[len(AllocationErrorCodes)].Load()
	}
	i := allocErrorSlot(code)
	if i == len(AllocationErrorCodes) {
		return 0
	}
	return e.allocErrors[i].Load()
}
