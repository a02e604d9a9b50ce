// Package record is the DTLS 1.2 record layer of TURN-DTLS associations
// whose handshake pion/dtls has finished with an ECDHE AES-GCM suite: keys
// derived per RFC 5246 §6.3 from what the handshake shows through pion's
// public API and the wire (Keys), and records sealed and opened with them
// (Records). It has one lock, Keys.mu, under which nothing is called;
// Records' sequence number is atomic, and Open runs on one goroutine.
package record

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/pion/dtls/v2"
	"github.com/pion/dtls/v2/pkg/crypto/prf"
)

// DTLS 1.2 record layer (RFC 6347 §4.1) with AES-GCM (RFC 5288, RFC 6347
// §4.1.2.1): the application data of an association whose handshake
// pion/dtls has finished is opened and sealed here, on the goroutine that
// reads the listener socket or the relay worker that delivers, instead of
// through pion's Conn, which hands each record through a goroutine of its
// own and starts a goroutine per Read and per Write (its connctx wrapper).
const (
	// Header is the size of a record header in bytes: type, version,
	// epoch, sequence number, length.
	Header        = 13
	gcmExplicitIV = 8 // the explicit part of the nonce, sent in the record
	gcmTag        = 16
	gcmOverhead   = gcmExplicitIV + gcmTag
	// Overhead is how many bytes a record adds to what it carries.
	Overhead = Header + gcmOverhead
	// ContentAppData, ContentAlert and ContentHandshake are the record
	// content types (RFC 5246 §6.2.1).
	ContentAppData   = 23
	ContentAlert     = 21
	ContentHandshake = 22
	// maxSeq is the largest 48-bit sequence number; an association that
	// reaches it must be closed (RFC 6347 §4.1).
	maxSeq = 1<<48 - 1
	// PionSeqHeadroom is how many sequence numbers Tern leaves to pion
	// after taking over an association's records.
	PionSeqHeadroom = 1 << 32
)

// ErrNoFastPath is New's error for a cipher suite whose records stay with
// pion/dtls.
var ErrNoFastPath = errors.New("cipher suite without a fast path")

// Records seals and opens one association's application data records
// at one epoch. Seal may run on several goroutines at once; open runs on
// the listener's reader only.
type Records struct {
	local, remote       cipher.AEAD
	localKey, remoteKey []byte // for State
	suite               uint16
	localIV, remoteIV   [4]byte
	epoch               uint16 // both directions: pion ends the handshake with equal epochs
	seq                 atomic.Uint64
	replay              replayWindow
	// openScratch holds Open's nonce and additional data: arrays on the
	// stack would escape to the heap through the cipher.AEAD interface, one
	// allocation each per record. Open runs on one goroutine.
	openScratch [scratch]byte
}

// scratch is the room for a nonce and the additional data of one record.
const scratch = 12 + Header

// SealRoom is the capacity Seal needs in dst to seal a payload of n bytes
// without allocating: the record, and room past it for the nonce and the
// additional data (which must not overlap the sealed output).
func SealRoom(n int) int { return Overhead + n + scratch }

// New derives an association's record keys (RFC 5246 §6.3) from
// what its handshake showed (Keys). It returns ErrNoFastPath for a
// cipher suite other than ECDHE with AES-GCM, whose records pion keeps
// handling.
func New(in Inputs) (*Records, error) { return newRecords(in, false) }

// NewClient is New for the client's end of the association: it seals
// with the client write key and opens with the server's. in is what a
// client's Keys gathered: its own key log and the records it received
// (Observe), so Tern's sequence numbers start past the server's, not the
// client's pion session's; the server's replay window takes any number
// above those pion used. Tests and benchmark clients use it to speak
// DTLS without pion's per-record goroutines.
func NewClient(in Inputs) (*Records, error) { return newRecords(in, true) }

func newRecords(in Inputs, client bool) (*Records, error) {
	var keyLen int
	var h prf.HashFunc
	switch dtls.CipherSuiteID(in.suite) {
	case dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, dtls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:
		keyLen, h = 16, sha256.New
	case dtls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, dtls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:
		keyLen, h = 32, sha512.New384
	default:
		return nil, ErrNoFastPath
	}
	if in.epoch == 0 {
		return nil, errors.New("dtls handshake not finished: no record sent at epoch 1")
	}
	keys, err := prf.GenerateEncryptionKeys(in.master, in.clientRandom[:], in.serverRandom[:], 0, keyLen, 4, h)
	if err != nil {
		return nil, err
	}
	r := &Records{epoch: in.epoch, suite: in.suite, localKey: keys.ServerWriteKey, remoteKey: keys.ClientWriteKey}
	copy(r.localIV[:], keys.ServerWriteIV)
	copy(r.remoteIV[:], keys.ClientWriteIV)
	if client {
		r.localKey, r.remoteKey = r.remoteKey, r.localKey
		r.localIV, r.remoteIV = r.remoteIV, r.localIV
	}
	if r.local, err = newGCM(r.localKey); err != nil {
		return nil, err
	}
	if r.remote, err = newGCM(r.remoteKey); err != nil {
		return nil, err
	}
	// Far past what pion has sent at this epoch (its Finished). pion keeps
	// its own counter for what it may still send itself: an alert, or its
	// last flight again each time the client's (or a spoofer's) flight
	// arrives again. Two records sealed with one sequence number would
	// reuse a GCM nonce, so pion's records must never reach ours: 2^32
	// retransmissions cannot happen within an association's life.
	r.seq.Store(in.seq + 1 + PionSeqHeadroom)
	return r, nil
}

// Epoch is the epoch of the records r seals and opens.
func (r *Records) Epoch() uint16 { return r.epoch }

// NextSeq is the sequence number of the next record r seals.
func (r *Records) NextSeq() uint64 { return r.seq.Load() }

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal appends to dst[:0] one application data record carrying p and
// returns it. It fails once the sequence numbers are used up.
func (r *Records) Seal(dst, p []byte) ([]byte, error) {
	return r.SealType(dst, ContentAppData, p)
}

// CloseNotify is the warning alert that ends an association (RFC 5246
// §7.2.1).
var CloseNotify = []byte{1, 0}

// sealType is seal for a record of content type typ.
func (r *Records) SealType(dst []byte, typ byte, p []byte) ([]byte, error) {
	seq := r.seq.Add(1) - 1
	if seq > maxSeq {
		return nil, errors.New("dtls sequence numbers used up")
	}
	n := Header + gcmExplicitIV + len(p) + gcmTag
	if cap(dst) < n+scratch {
		dst = make([]byte, 0, n+scratch)
	}
	// The nonce and additional data go past the record in dst's capacity:
	// arrays on the stack would escape through the cipher.AEAD interface.
	sc := dst[n : n+scratch]
	nonce, ad := sc[:12], sc[12:]
	dst = dst[:Header+gcmExplicitIV]
	dst[0] = typ
	dst[1], dst[2] = 0xfe, 0xfd // DTLS 1.2
	binary.BigEndian.PutUint64(dst[3:11], uint64(r.epoch)<<48|seq)
	binary.BigEndian.PutUint16(dst[11:13], uint16(len(p)))
	// The explicit nonce is the epoch and sequence number, unique per key
	// (RFC 5288 §3 allows any unique value).
	copy(dst[13:21], dst[3:11])
	copy(nonce[:4], r.localIV[:])
	copy(nonce[4:], dst[3:11])
	// Additional data: seq_num(8) + type + version + length (RFC 5246
	// §6.2.3.3) — the record header as it stands before the length is
	// set to the sealed length.
	copy(ad[:], dst[3:11])
	copy(ad[8:11], dst[0:3])
	copy(ad[11:13], dst[11:13])
	dst = r.local.Seal(dst, nonce, p, ad)
	binary.BigEndian.PutUint16(dst[11:13], uint16(len(dst)-Header))
	return dst, nil
}

// open decrypts, in place, the application data record rec (a whole
// record, header included) of the association's epoch and returns its
// plaintext. ok is false for a record that fails authentication or
// repeats one already seen (RFC 6347 §4.1.2.6); such records are dropped.
func (r *Records) Open(rec []byte) (p []byte, ok bool) {
	if len(rec) < Header+gcmOverhead {
		return nil, false
	}
	seq := binary.BigEndian.Uint64(rec[3:11]) & maxSeq
	if !r.replay.fresh(seq) {
		return nil, false
	}
	nonce, ad := r.openScratch[:12], r.openScratch[12:]
	copy(nonce[:4], r.remoteIV[:])
	copy(nonce[4:], rec[Header:Header+gcmExplicitIV])
	ct := rec[Header+gcmExplicitIV:]
	copy(ad[:], rec[3:11])
	copy(ad[8:11], rec[0:3])
	binary.BigEndian.PutUint16(ad[11:13], uint16(len(ct)-gcmTag))
	p, err := r.remote.Open(ct[:0], nonce, ct, ad)
	if err != nil {
		return nil, false
	}
	r.replay.mark(seq)
	return p, true
}

// replayWindow is RFC 6347 §4.1.2.6's sliding window of the last 64
// sequence numbers received.
type replayWindow struct {
	top  uint64 // highest sequence number accepted, plus one (0: none)
	mask uint64 // bit i: top-1-i was received
}

// fresh reports whether seq may be new: above the window, or inside it and
// not yet received. Only authenticated records go into the window (mark).
func (w *replayWindow) fresh(seq uint64) bool {
	if seq >= w.top {
		return true
	}
	d := w.top - 1 - seq
	return d < 64 && w.mask&(1<<d) == 0
}

func (w *replayWindow) mark(seq uint64) {
	if seq >= w.top {
		shift := seq + 1 - w.top
		if shift >= 64 {
			w.mask = 0
		} else {
			w.mask <<= shift
		}
		w.mask |= 1
		w.top = seq + 1
		return
	}
	w.mask |= 1 << (w.top - 1 - seq)
}
