// Package tlsrecord is the TLS 1.3 record layer (RFC 8446 §5) of a
// TURN-TLS connection whose handshake crypto/tls has finished: the
// traffic keys derived (§7.1, §7.3) from the secrets crypto/tls writes to
// its key log (Secrets), application data sealed and opened in place with
// no heap allocation (Records), and the one post-handshake message a TLS
// 1.3 client sends a server that asks for no client certificate, KeyUpdate
// (§4.6.3). crypto/tls offers no such access to its records, and its
// Conn.Read allocates each time it reads a record from its socket, which a
// connection served by an event loop does once per wake-up.
//
// Taking a connection's records over is only sound when crypto/tls holds
// none of them: RecordConn, under the handshake, never reads past the end
// of a record, so once the handshake's last record (the client's Finished)
// is read nothing of the client's waits inside crypto/tls; and a server
// that sends no NewSessionTicket (tls.Config.SessionTicketsDisabled) has
// sealed nothing under the application keys, so both directions start at
// sequence number 0.
//
// Records has no lock: Seal, SealData and SealKeyUpdate must be serialized
// by the caller (the connection's write lock, which also keeps records on
// the wire in their sequence order), and Open and HandleHandshake run on
// the connection's reader alone. Session carries application data over a
// connection with Records, its writes under its lock wmu. Locks: Secrets.mu
// and Session.wmu are leaves, never held together; nothing is called
// under Secrets.mu, and under wmu only Records' sealing and the
// connection's Write.
package tlsrecord

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"

	"golang.org/x/crypto/chacha20poly1305"
)

const (
	// Header is the size of a record header in bytes: type, legacy
	// version, length (RFC 8446 §5.1).
	Header = 5
	// MaxPlaintext is the most a record carries, in bytes (§5.1).
	MaxPlaintext = 1 << 14
	// MaxCiphertext is the largest protected record body, in bytes
	// (§5.2); a longer one is a record_overflow.
	MaxCiphertext = MaxPlaintext + 256
	// tagLen is the AEAD tag of every TLS 1.3 suite, in bytes.
	tagLen = 16
	// Overhead is what sealing adds to a payload, in bytes: the header,
	// the inner content type and the tag.
	Overhead = Header + 1 + tagLen

	// ContentAlert, ContentHandshake and ContentAppData are the record
	// content types (§5.1); every protected record's outer type is
	// ContentAppData, its inner type is one of the three.
	ContentAlert     = 21
	ContentHandshake = 22
	ContentAppData   = 23

	// typeKeyUpdate and typeNewSessionTicket are handshake message types
	// (§4).
	typeKeyUpdate        = 24
	typeNewSessionTicket = 4
)

var (
	// ErrNoFastPath is New's error for a suite whose records stay with
	// crypto/tls (a TLS 1.2 suite).
	ErrNoFastPath = errors.New("tlsrecord: not a TLS 1.3 cipher suite")
	// ErrMalformed is a record or post-handshake message that breaks the
	// format: a record not of the outer type application_data, too long
	// or too short, all padding, or a handshake message the server does
	// not take; the connection must end (unexpected_message,
	// record_overflow or decode_error).
	ErrMalformed = errors.New("tlsrecord: malformed record")
	// ErrBadRecord is a record that fails authentication; the connection
	// must end (bad_record_mac, §5.2).
	ErrBadRecord = errors.New("tlsrecord: record failed authentication")
	// ErrTooLong is Seal's error for a payload over MaxPlaintext.
	ErrTooLong = errors.New("tlsrecord: payload over 16384 bytes")
)

// suite is what a TLS 1.3 cipher suite fixes: the AEAD, its key size in
// bytes and the hash of its key schedule.
type suite struct {
	keyLen int
	hash   func() hash.Hash
	aead   func(key []byte) (cipher.AEAD, error)
}

var suites = map[uint16]suite{
	tls.TLS_AES_128_GCM_SHA256:       {16, sha256.New, newGCM},
	tls.TLS_AES_256_GCM_SHA384:       {32, sha512.New384, newGCM},
	tls.TLS_CHACHA20_POLY1305_SHA256: {32, sha256.New, chacha20poly1305.New},
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// direction is one direction's keys and sequence number.
type direction struct {
	aead   cipher.AEAD
	iv     [12]byte
	seq    uint64
	secret []byte
	// nonce is the per-record nonce's room: an array on the stack would
	// escape to the heap through the cipher.AEAD interface, an
	// allocation per record.
	nonce [12]byte
}

// Records seals one connection's records toward its peer and opens the
// peer's, at TLS 1.3 (see the package comment for who may call what).
type Records struct {
	suite     suite
	in, out   direction
	keyUpdate [5]byte // SealKeyUpdate's message
}

// New returns the record layer of a connection that negotiated cipher
// suite id (tls.ConnectionState.CipherSuite) with the application traffic
// secrets client and server (Secrets.Traffic); server tells which end
// this is. It returns ErrNoFastPath for a suite that is not TLS 1.3's.
func New(id uint16, client, server []byte, isServer bool) (*Records, error) {
	s, ok := suites[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoFastPath, tls.CipherSuiteName(id))
	}
	r := &Records{suite: s}
	in, out := client, server
	if !isServer {
		in, out = server, client
	}
	if err := r.in.set(s, in); err != nil {
		return nil, err
	}
	if err := r.out.set(s, out); err != nil {
		return nil, err
	}
	return r, nil
}

// set keys d from traffic secret secret (§7.3) and restarts its sequence.
func (d *direction) set(s suite, secret []byte) error {
	if len(secret) != s.hash().Size() {
		return fmt.Errorf("tlsrecord: traffic secret of %d bytes, want %d", len(secret), s.hash().Size())
	}
	key, err := expandLabel(s.hash, secret, "key", s.keyLen)
	if err != nil {
		return err
	}
	iv, err := expandLabel(s.hash, secret, "iv", len(d.iv))
	if err != nil {
		return err
	}
	aead, err := s.aead(key)
	if err != nil {
		return err
	}
	d.aead, d.secret, d.seq = aead, secret, 0
	copy(d.iv[:], iv)
	return nil
}

// update moves d to the next generation of its traffic secret (§7.2).
func (d *direction) update(s suite) error {
	next, err := expandLabel(s.hash, d.secret, "traffic upd", len(d.secret))
	if err != nil {
		return err
	}
	return d.set(s, next)
}

// expandLabel is HKDF-Expand-Label with an empty context (§7.1).
func expandLabel(h func() hash.Hash, secret []byte, label string, length int) ([]byte, error) {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0) // the context: empty
	return hkdf.Expand(h, secret, string(info), length)
}

// next returns the nonce of d's next record (§5.3): the IV XOR the
// sequence number, which it then advances. A sequence number that would
// wrap ends the connection instead (§5.3 requires a key update first;
// 2^64 records are out of reach in practice).
func (d *direction) next() ([]byte, error) {
	if d.seq == ^uint64(0) {
		return nil, errors.New("tlsrecord: sequence numbers exhausted")
	}
	d.nonce = d.iv
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], d.seq)
	for i := range s {
		d.nonce[4+i] ^= s[i]
	}
	d.seq++
	return d.nonce[:], nil
}

// SealRoom is the capacity, in bytes, that Seal needs past the end of dst
// to seal a payload of n bytes (at most MaxPlaintext) without allocating.
func SealRoom(n int) int { return Overhead + n }

// Seal appends to dst one record of inner content type typ carrying p (at
// most MaxPlaintext bytes) and returns the extended dst. p may not overlap
// dst's room past its length. It allocates only when dst lacks
// SealRoom(len(p)). Errors: ErrTooLong, or sequence numbers exhausted.
func (r *Records) Seal(dst []byte, typ byte, p []byte) ([]byte, error) {
	if len(p) > MaxPlaintext {
		return dst, ErrTooLong
	}
	nonce, err := r.out.next()
	if err != nil {
		return dst, err
	}
	start := len(dst)
	n := len(p) + 1 + tagLen
	dst = slices.Grow(dst, Header+n) // the tag is sealed in place too
	dst = append(dst, ContentAppData, 3, 3, byte(n>>8), byte(n))
	dst = append(dst, p...)
	dst = append(dst, typ)
	body := dst[start+Header:]
	out := r.out.aead.Seal(body[:0], nonce, body, dst[start:start+Header])
	return dst[:start+Header+len(out)], nil
}

// SealData appends to dst the records of application data p, in pieces
// of at most MaxPlaintext bytes, and returns the extended dst (allocating
// only when dst lacks SealRoom per piece). An empty p seals nothing.
func (r *Records) SealData(dst, p []byte) ([]byte, error) {
	for len(p) > 0 {
		k := min(len(p), MaxPlaintext)
		var err error
		if dst, err = r.Seal(dst, ContentAppData, p[:k]); err != nil {
			return dst, err
		}
		p = p[k:]
	}
	return dst, nil
}

// SealKeyUpdate appends to dst a KeyUpdate (update_not_requested) sealed
// under the current keys, then moves this end's sending keys to their
// next generation (§4.6.3): the answer HandleHandshake asks for, which
// must leave before the next application data record.
func (r *Records) SealKeyUpdate(dst []byte) ([]byte, error) {
	r.keyUpdate = [5]byte{typeKeyUpdate, 0, 0, 1, 0}
	dst, err := r.Seal(dst, ContentHandshake, r.keyUpdate[:])
	if err != nil {
		return dst, err
	}
	return dst, r.out.update(r.suite)
}

// RecordLen reads the header at the start of b and returns the length of
// the whole record in bytes, or 0 when b holds less than a header. The
// legacy version is ignored (§5.1). Errors: ErrMalformed for an outer type
// other than application_data, or a body over MaxCiphertext or too short
// to hold a tag and a content type.
func RecordLen(b []byte) (int, error) {
	if len(b) < Header {
		return 0, nil
	}
	n := int(b[3])<<8 | int(b[4])
	if b[0] != ContentAppData || n > MaxCiphertext || n < 1+tagLen {
		return 0, ErrMalformed
	}
	return Header + n, nil
}

// Open authenticates and decrypts rec, one whole record (RecordLen bytes),
// in place, and returns its inner content type and plaintext, which lies
// in rec. Errors: ErrMalformed (see RecordLen; a plaintext that is all
// padding or over MaxPlaintext), ErrBadRecord.
func (r *Records) Open(rec []byte) (typ byte, p []byte, err error) {
	n, err := RecordLen(rec)
	if err != nil {
		return 0, nil, err
	}
	if n != len(rec) {
		return 0, nil, ErrMalformed
	}
	nonce, err := r.in.next()
	if err != nil {
		return 0, nil, err
	}
	body := rec[Header:]
	pt, err := r.in.aead.Open(body[:0], nonce, body, rec[:Header])
	if err != nil {
		return 0, nil, ErrBadRecord
	}
	i := len(pt) - 1
	for i >= 0 && pt[i] == 0 {
		i--
	}
	if i < 0 || i > MaxPlaintext {
		return 0, nil, ErrMalformed
	}
	return pt[i], pt[:i], nil
}

// HandleHandshake takes the plaintext of a record Open found to be of
// type handshake: one or more whole post-handshake messages. A KeyUpdate
// moves the peer's keys to their next generation, and when the peer asks
// for one back (update_requested) HandleHandshake reports respond: the
// caller must SealKeyUpdate before its next application data (§4.6.3).
// Errors: ErrMalformed for a message split across records, a KeyUpdate
// not last in its record (§5.1: handshake messages do not span a key
// change), a bad request_update value, a NewSessionTicket (a server's
// message) or any other type (a server that asked for no certificate
// expects none).
func (r *Records) HandleHandshake(p []byte) (respond bool, err error) {
	for len(p) > 0 {
		if len(p) < 4 {
			return false, ErrMalformed
		}
		n := int(p[1])<<16 | int(p[2])<<8 | int(p[3])
		if len(p) < 4+n {
			return false, ErrMalformed
		}
		typ, body := p[0], p[4:4+n]
		p = p[4+n:]
		switch {
		case typ == typeKeyUpdate && n == 1 && body[0] <= 1 && len(p) == 0:
			if err := r.in.update(r.suite); err != nil {
				return false, err
			}
			respond = respond || body[0] == 1
		case typ == typeNewSessionTicket:
			return false, fmt.Errorf("%w: NewSessionTicket from the client", ErrMalformed)
		default:
			return false, fmt.Errorf("%w: handshake message %d after the handshake", ErrMalformed, typ)
		}
	}
	return respond, nil
}
