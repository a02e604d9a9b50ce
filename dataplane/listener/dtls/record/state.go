package record

import (
	"errors"
	"fmt"
)

// State is what a Records holds, for a hand-over of the association to a
// successor process (dataplane/takeover): the keys and implicit nonces of
// both directions (RFC 5288 §3), the epoch, the next sequence number to
// seal and the replay window of what was opened (RFC 6347 §4.1.2.6).
// Local is this end's write direction (the server's, for New).
type State struct {
	Suite               uint16
	Epoch               uint16
	LocalKey, RemoteKey []byte
	LocalIV, RemoteIV   [4]byte
	// NextSeq is the sequence number of the next record to seal.
	NextSeq uint64
	// ReplayTop is the highest sequence number opened plus one (0: none);
	// bit i of ReplayMask is set when ReplayTop-1-i was opened.
	ReplayTop, ReplayMask uint64
}

// State returns r's state. The caller must make sure no Open runs at the
// same time (the listener's reader is paused); a Seal running meanwhile
// may take the sequence number returned, so a successor starts past it
// (FromState's skip).
func (r *Records) State() State {
	return State{Suite: r.suite, Epoch: r.epoch,
		LocalKey: append([]byte(nil), r.localKey...), RemoteKey: append([]byte(nil), r.remoteKey...),
		LocalIV: r.localIV, RemoteIV: r.remoteIV, NextSeq: r.seq.Load(),
		ReplayTop: r.replay.top, ReplayMask: r.replay.mask}
}

// FromState makes the Records of an association handed over by another
// process (State). It seals from st.NextSeq + skip on, so that no
// sequence number, and so no AES-GCM nonce, that the other process may
// still have used is used again; its replay window is st's, so the peer's
// next records are accepted and a replayed one is not. It returns an error
// naming the field for a suite without a fast path, a key of the wrong
// length for the suite, epoch 0 or sequence numbers used up.
func FromState(st State, skip uint64) (*Records, error) {
	var keyLen int
	switch st.Suite {
	case 0xc02b, 0xc02f: // TLS_ECDHE_{ECDSA,RSA}_WITH_AES_128_GCM_SHA256
		keyLen = 16
	case 0xc02c, 0xc030: // TLS_ECDHE_{ECDSA,RSA}_WITH_AES_256_GCM_SHA384
		keyLen = 32
	default:
		return nil, fmt.Errorf("suite %#04x: %w", st.Suite, ErrNoFastPath)
	}
	switch {
	case len(st.LocalKey) != keyLen || len(st.RemoteKey) != keyLen:
		return nil, fmt.Errorf("keys: %d and %d bytes, want %d for suite %#04x", len(st.LocalKey), len(st.RemoteKey), keyLen, st.Suite)
	case st.Epoch == 0:
		return nil, errors.New("epoch: 0, the handshake's")
	case st.NextSeq > maxSeq || skip > maxSeq-st.NextSeq:
		return nil, fmt.Errorf("next sequence number %d: used up", st.NextSeq)
	case st.ReplayTop > maxSeq+1:
		return nil, fmt.Errorf("replay window top %d: beyond 48 bits", st.ReplayTop)
	}
	r := &Records{epoch: st.Epoch, suite: st.Suite, localIV: st.LocalIV, remoteIV: st.RemoteIV,
		localKey: append([]byte(nil), st.LocalKey...), remoteKey: append([]byte(nil), st.RemoteKey...)}
	var err error
	if r.local, err = newGCM(r.localKey); err != nil {
		return nil, err
	}
	if r.remote, err = newGCM(r.remoteKey); err != nil {
		return nil, err
	}
	r.seq.Store(st.NextSeq + skip)
	r.replay = replayWindow{top: st.ReplayTop, mask: st.ReplayMask}
	return r, nil
}
