// Package takeover is the hand-over of a running ternd to its successor on
// the same host (ternd --takeover, docs/operations.md): the snapshot of the
// allocation table that travels with the sockets (this file) and the
// messages of the Unix socket they travel over (conn.go). It takes no lock
// of its own; package dataplane decides what is handed over and when.
package takeover

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"

	"github.com/tern-gw/tern/turn"
)

// Version is the snapshot format this ternd writes and the only one it
// reads. A change to the layout below takes a new version: a reader never
// guesses at a layout it does not know.
const Version = 3

// magic starts every snapshot.
const magic = "TERNSNAP"

// Layout: magic (8 bytes), version (uint16), reserved (uint16, 0), payload
// length (uint32), payload, SHA-256 of everything before it (32 bytes).
// Integers are big-endian. The payload:
//
//	created   int64 unix ns
//	realm     string16
//	nonceKey  [32]byte
//	listeners uint16, each: name string16, address addr, sockets uint16
//	allocs    uint32, each:
//	  listener uint16 (index into listeners)
//	  client addr, server addr, proto uint8
//	  username string16, key bytes8
//	  relays uint8 (1-2), each addr
//	  expires int64, lastTxID [12]byte, token uint64, addressError uint16
//	  permissions uint16, each: ip (addr with port 0), expires int64
//	  channels uint16, each: number uint16, peer addr, expires int64
//	quota: slots uint32, stateBytes int64
//	counters uint32, each: series string16, value uint64 (float64 bits)
//	dtls     (dtls.go)
//	offload  (offload.go)
//
// Version 2 added the counters, version 3 the TURN-DTLS section (dtls.go)
// and the offload section (offload.go) after them.
//
// string16 is a uint16 length and the bytes; bytes8 a uint8 length and the
// bytes; addr is a family byte (4 or 6), 4 or 16 bytes of IP and a uint16
// port.
const (
	headerLen = len(magic) + 2 + 2 + 4
	sumLen    = sha256.Size
)

// Snapshot is the allocation table of a ternd at the moment it stopped
// reading its sockets, as its successor needs it.
type Snapshot struct {
	// Created is when the snapshot was taken, unix nanoseconds.
	Created int64
	// Realm is the realm the allocations' keys were made for.
	Realm string
	// NonceKey is the engine's nonce key (turn.Engine.NonceKey), so that
	// the successor accepts the nonces clients hold.
	NonceKey [32]byte
	// Listeners are the TURN-UDP listeners whose sockets are handed over,
	// in the order of their descriptors.
	Listeners []Listener
	// Allocations are the allocations handed over, in the order of their
	// relay sockets' descriptors (after the listeners').
	Allocations []Allocation
	// Slots and StateBytes are the quota slots and state budget bytes the
	// exporting engine counted for these allocations, so that the
	// successor can report whether it counts the same.
	Slots      uint32
	StateBytes int64
	// Counters are the values of the exporting ternd's counter series at
	// the moment it stopped, by series as /metrics writes them
	// (`name{labels}`), which the successor carries on from so that no
	// counter goes backwards across an upgrade.
	Counters []Counter
	// DTLSListeners are the TURN-DTLS listeners whose sockets are handed
	// over, and Associations their associations whose handshake was done
	// (dtls.go).
	DTLSListeners []DTLSListener
	Associations  []Association
	// Offload is the kernel fast path that relays on through the switch
	// (offload.go), nil when the exporting ternd had none attached. Its
	// descriptors follow the relay sockets'.
	Offload *Offload
}

// Counter is one counter series of a Snapshot.
type Counter struct {
	Series string
	Value  float64
}

// Listener is a TURN-UDP listener of a Snapshot.
type Listener struct {
	// Name is the listener's name in the config.
	Name string
	// Address is the address it is bound to.
	Address netip.AddrPort
	// Sockets is how many SO_REUSEPORT sockets it has (descriptors).
	Sockets uint16
}

// Allocation is an allocation of a Snapshot: the engine's state
// (turn.AllocationState), the listener it was made through and the
// long-term key (RFC 8489 §9.2.2) its username had when it was taken, empty
// when the credential had expired by then.
type Allocation struct {
	Listener uint16
	Key      []byte
	turn.AllocationState
}

// FDs returns how many descriptors travel with s: each listener's sockets,
// then each allocation's relay sockets, then the TURN-DTLS section's
// (dtls.go), then the offload's.
func (s *Snapshot) FDs() int {
	n := 0
	for _, l := range s.Listeners {
		n += int(l.Sockets)
	}
	for _, a := range s.Allocations {
		n += len(a.Relays)
	}
	return n + s.dtlsFDs() + s.Offload.FDs()
}

// Errors of Decode; each is wrapped with what was found.
var (
	// ErrVersion: the snapshot is of a version this ternd does not read.
	ErrVersion = errors.New("snapshot version not supported")
	// ErrChecksum: the snapshot does not match its checksum.
	ErrChecksum = errors.New("snapshot checksum mismatch")
	// ErrMalformed: not a snapshot, or its payload does not parse.
	ErrMalformed = errors.New("snapshot malformed")
)

// Encode returns s in the format of Version, or an error naming a field
// that does not fit it (a count or a string too long, an invalid address).
func Encode(s *Snapshot) ([]byte, error) {
	var w writer
	w.i64(s.Created)
	w.str16(s.Realm, "realm")
	w.b = append(w.b, s.NonceKey[:]...)
	w.count16(len(s.Listeners), "listeners")
	for i, l := range s.Listeners {
		w.str16(l.Name, fmt.Sprintf("listeners[%d].name", i))
		w.addr(l.Address, fmt.Sprintf("listeners[%d].address", i))
		w.u16(l.Sockets)
	}
	if len(s.Allocations) > math.MaxUint32 {
		return nil, errors.New("snapshot: allocations: too many")
	}
	w.u32(uint32(len(s.Allocations)))
	for i, a := range s.Allocations {
		f := fmt.Sprintf("allocations[%d]", i)
		if int(a.Listener) >= len(s.Listeners) {
			w.fail(f + ".listener: no such listener")
		}
		w.u16(a.Listener)
		w.alloc(a.Key, &a.AllocationState, f)
	}
	w.u32(s.Slots)
	w.i64(s.StateBytes)
	if uint64(len(s.Counters)) > math.MaxUint32 {
		w.fail("too many counters")
	}
	w.u32(uint32(len(s.Counters)))
	for i, c := range s.Counters {
		w.str16(c.Series, fmt.Sprintf("counters[%d]", i))
		w.u64(math.Float64bits(c.Value))
	}
	w.dtls(s)
	w.offload(s.Offload)
	if w.err != nil {
		return nil, w.err
	}
	if len(w.b) > math.MaxUint32 {
		return nil, errors.New("snapshot: larger than 4 GiB")
	}
	out := make([]byte, 0, headerLen+len(w.b)+sumLen)
	out = append(out, magic...)
	out = binary.BigEndian.AppendUint16(out, Version)
	out = binary.BigEndian.AppendUint16(out, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(len(w.b)))
	out = append(out, w.b...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

// Decode parses a snapshot written by Encode. It checks the version, the
// length and the checksum before it reads the payload, and reads the
// payload whole: on any error it returns nil and an error wrapping
// ErrVersion, ErrChecksum or ErrMalformed that says what was wrong, never
// part of a snapshot.
func Decode(b []byte) (*Snapshot, error) {
	if len(b) < headerLen+sumLen || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: no snapshot header (%d bytes)", ErrMalformed, len(b))
	}
	if v := binary.BigEndian.Uint16(b[8:10]); v != Version {
		return nil, fmt.Errorf("%w: snapshot is version %d, this ternd reads version %d only: hand over between releases that share a snapshot version", ErrVersion, v, Version)
	}
	if binary.BigEndian.Uint16(b[10:12]) != 0 {
		return nil, fmt.Errorf("%w: reserved header bits set", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(b[12:16])
	if uint64(len(b)) != uint64(headerLen)+uint64(n)+sumLen {
		return nil, fmt.Errorf("%w: payload length %d, but %d bytes follow the header", ErrMalformed, n, len(b)-headerLen-sumLen)
	}
	body := b[:len(b)-sumLen]
	if sum := sha256.Sum256(body); string(sum[:]) != string(b[len(body):]) {
		return nil, fmt.Errorf("%w: the snapshot was damaged or cut short", ErrChecksum)
	}
	r := reader{b: body[headerLen:]}
	s := &Snapshot{}
	s.Created = r.i64()
	s.Realm = r.str16()
	copy(s.NonceKey[:], r.take(32))
	nl := r.count(int(r.u16()), 7)
	for range nl {
		s.Listeners = append(s.Listeners, Listener{Name: r.str16(), Address: r.addr(), Sockets: r.u16()})
	}
	na := r.count(int(r.u32()), 50)
	for i := 0; i < na && r.err == nil; i++ {
		var a Allocation
		a.Listener = r.u16()
		if r.err == nil && int(a.Listener) >= len(s.Listeners) {
			r.fail(fmt.Sprintf("allocations[%d].listener %d: no such listener", i, a.Listener))
		}
		a.Key = r.alloc(&a.AllocationState, fmt.Sprintf("allocations[%d]", i))
		s.Allocations = append(s.Allocations, a)
	}
	s.Slots = r.u32()
	s.StateBytes = r.i64()
	nk := r.count(int(r.u32()), 10)
	for range nk {
		c := Counter{Series: r.str16()}
		c.Value = math.Float64frombits(r.u64())
		if math.IsNaN(c.Value) || math.IsInf(c.Value, 0) || c.Value < 0 {
			r.fail(fmt.Sprintf("counter %q: value %v", c.Series, c.Value))
		}
		s.Counters = append(s.Counters, c)
	}
	r.dtls(s)
	s.Offload = r.offload()
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d bytes after the payload", len(r.b)))
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// alloc writes an allocation's key and state (the layout's allocation
// entry after its listener index); f names it in errors.
func (w *writer) alloc(key []byte, a *turn.AllocationState, f string) {
	w.addr(a.FiveTuple.Client, f+".client")
	w.addr(a.FiveTuple.Server, f+".server")
	w.b = append(w.b, byte(a.FiveTuple.Proto))
	w.str16(a.Username, f+".username")
	if len(key) > math.MaxUint8 {
		w.fail(f + ".key: longer than 255 bytes")
	}
	w.b = append(w.b, byte(len(key)))
	w.b = append(w.b, key...)
	if len(a.Relays) < 1 || len(a.Relays) > 2 {
		w.fail(f + ".relays: want 1 or 2")
	}
	w.b = append(w.b, byte(len(a.Relays)))
	for j, r := range a.Relays {
		w.addr(r, fmt.Sprintf("%s.relays[%d]", f, j))
	}
	w.i64(a.Expires)
	w.b = append(w.b, a.LastTxID[:]...)
	w.u64(a.Token)
	w.u16(a.AddressError)
	w.count16(len(a.Permissions), f+".permissions")
	for j, p := range a.Permissions {
		w.addr(netip.AddrPortFrom(p.Peer, 0), fmt.Sprintf("%s.permissions[%d]", f, j))
		w.i64(p.Expires)
	}
	w.count16(len(a.Channels), f+".channels")
	for j, c := range a.Channels {
		w.u16(c.Number)
		w.addr(c.Peer, fmt.Sprintf("%s.channels[%d]", f, j))
		w.i64(c.Expires)
	}
}

// writer appends the payload; the first error sticks.
type writer struct {
	b   []byte
	err error
}

func (w *writer) fail(msg string) {
	if w.err == nil {
		w.err = errors.New("snapshot: " + msg)
	}
}

func (w *writer) u16(v uint16) { w.b = binary.BigEndian.AppendUint16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *writer) i64(v int64)  { w.u64(uint64(v)) }

func (w *writer) count16(n int, field string) {
	if n > math.MaxUint16 {
		w.fail(field + ": more than 65535")
	}
	w.u16(uint16(n))
}

func (w *writer) str16(s, field string) {
	if len(s) > math.MaxUint16 {
		w.fail(field + ": longer than 65535 bytes")
	}
	w.u16(uint16(len(s)))
	w.b = append(w.b, s...)
}

func (w *writer) addr(a netip.AddrPort, field string) {
	ip := a.Addr()
	switch {
	case !a.IsValid():
		w.fail(field + ": invalid address")
	case ip.Is4():
		w.b = append(w.b, 4)
		v := ip.As4()
		w.b = append(w.b, v[:]...)
	default:
		w.b = append(w.b, 6)
		v := ip.WithZone("").As16()
		w.b = append(w.b, v[:]...)
	}
	w.u16(a.Port())
}

// alloc reads what writer.alloc wrote into a and returns the key; f names
// the allocation in errors.
func (r *reader) alloc(a *turn.AllocationState, f string) []byte {
	a.FiveTuple.Client, a.FiveTuple.Server = r.addr(), r.addr()
	a.FiveTuple.Proto = turn.Proto(r.u8())
	a.Username = r.str16()
	key := append([]byte(nil), r.take(int(r.u8()))...)
	nr := int(r.u8())
	if r.err == nil && (nr < 1 || nr > 2) {
		r.fail(fmt.Sprintf("%s.relays: %d, want 1 or 2", f, nr))
	}
	for range nr {
		a.Relays = append(a.Relays, r.addr())
	}
	a.Expires = r.i64()
	copy(a.LastTxID[:], r.take(12))
	a.Token = r.u64()
	a.AddressError = r.u16()
	np := r.count(int(r.u16()), 15)
	for range np {
		a.Permissions = append(a.Permissions, turn.PermissionState{Peer: r.addr().Addr(), Expires: r.i64()})
	}
	nc := r.count(int(r.u16()), 17)
	for range nc {
		a.Channels = append(a.Channels, turn.ChannelState{Number: r.u16(), Peer: r.addr(), Expires: r.i64()})
	}
	return key
}

// reader consumes the payload; the first error sticks and every read after
// it returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, msg)
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.fail("payload cut short")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) i64() int64 { return int64(r.u64()) }

func (r *reader) str16() string { return string(r.take(int(r.u16()))) }

// count returns n when n entries of at least min bytes each can fit in
// what is left, so that a forged count cannot make the decoder allocate
// more than the snapshot's own size; else it fails.
func (r *reader) count(n, min int) int {
	if r.err != nil {
		return 0
	}
	if n*min > len(r.b) {
		r.fail(fmt.Sprintf("count %d does not fit in the %d bytes left", n, len(r.b)))
		return 0
	}
	return n
}

func (r *reader) addr() netip.AddrPort {
	var ip netip.Addr
	switch r.u8() {
	case 4:
		if v := r.take(4); v != nil {
			ip = netip.AddrFrom4([4]byte(v))
		}
	case 6:
		if v := r.take(16); v != nil {
			ip = netip.AddrFrom16([16]byte(v))
		}
	default:
		r.fail("address family not 4 or 6")
	}
	return netip.AddrPortFrom(ip, r.u16())
}
