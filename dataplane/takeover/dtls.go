package takeover

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/tern-gw/tern/turn"
)

// The TURN-DTLS section of a snapshot (version 3), after the counters and before the offload section:
//
//	dtlsListeners uint16, each: name string16, address addr
//	associations  uint32, each:
//	  listener uint16 (index into dtlsListeners)
//	  client addr, local addr (the server address of its 5-tuple)
//	  suite uint16, epoch uint16
//	  localKey bytes8, remoteKey bytes8, localIV [4]byte, remoteIV [4]byte
//	  nextSeq uint64, replayTop uint64, replayMask uint64
//	  allocs uint8 (0 or 1), each: an allocation entry without its
//	    listener index (key bytes8 and state as above)
//
// Each TURN-DTLS listener hands over its one socket; its descriptor comes
// after the TURN-UDP relay sockets, and after the DTLS listeners' sockets
// come the relay sockets of the associations' allocations, in order.

// DTLSListener is a TURN-DTLS listener of a Snapshot: one socket.
type DTLSListener struct {
	Name    string
	Address netip.AddrPort
}

// Association is a TURN-DTLS association of a Snapshot whose handshake
// was done: its addresses, its record layer's state (keys and implicit
// nonces of both directions, RFC 5288 §3; epoch; next sequence number to
// seal; replay window, RFC 6347 §4.1.2.6), and its allocation, if it has
// one.
type Association struct {
	Listener            uint16
	Client, Local       netip.AddrPort
	Suite, Epoch        uint16
	LocalKey, RemoteKey []byte
	LocalIV, RemoteIV   [4]byte
	NextSeq             uint64
	ReplayTop           uint64
	ReplayMask          uint64
	// Allocations holds the association's allocation (at most one: its
	// 5-tuple's), with the long-term key its username had.
	Allocations []Allocation
}

// dtlsFDs counts the descriptors of the TURN-DTLS section.
func (s *Snapshot) dtlsFDs() int {
	n := len(s.DTLSListeners)
	for _, a := range s.Associations {
		for _, al := range a.Allocations {
			n += len(al.Relays)
		}
	}
	return n
}

func (w *writer) dtls(s *Snapshot) {
	w.count16(len(s.DTLSListeners), "dtlsListeners")
	for i, l := range s.DTLSListeners {
		w.str16(l.Name, fmt.Sprintf("dtlsListeners[%d].name", i))
		w.addr(l.Address, fmt.Sprintf("dtlsListeners[%d].address", i))
	}
	if uint64(len(s.Associations)) > math.MaxUint32 {
		w.fail("associations: too many")
	}
	w.u32(uint32(len(s.Associations)))
	for i, a := range s.Associations {
		f := fmt.Sprintf("associations[%d]", i)
		if int(a.Listener) >= len(s.DTLSListeners) {
			w.fail(f + ".listener: no such TURN-DTLS listener")
		}
		w.u16(a.Listener)
		w.addr(a.Client, f+".client")
		w.addr(a.Local, f+".local")
		w.u16(a.Suite)
		w.u16(a.Epoch)
		for _, k := range [][]byte{a.LocalKey, a.RemoteKey} {
			if len(k) > math.MaxUint8 {
				w.fail(f + ".key: longer than 255 bytes")
			}
			w.b = append(w.b, byte(len(k)))
			w.b = append(w.b, k...)
		}
		w.b = append(w.b, a.LocalIV[:]...)
		w.b = append(w.b, a.RemoteIV[:]...)
		w.u64(a.NextSeq)
		w.u64(a.ReplayTop)
		w.u64(a.ReplayMask)
		if len(a.Allocations) > 1 {
			w.fail(f + ".allocations: more than one")
		}
		w.b = append(w.b, byte(len(a.Allocations)))
		for j, al := range a.Allocations {
			w.alloc(al.Key, &al.AllocationState, fmt.Sprintf("%s.allocations[%d]", f, j))
		}
	}
}

func (r *reader) dtls(s *Snapshot) {
	nl := r.count(int(r.u16()), 5)
	for range nl {
		s.DTLSListeners = append(s.DTLSListeners, DTLSListener{Name: r.str16(), Address: r.addr()})
	}
	na := r.count(int(r.u32()), 63)
	for i := 0; i < na && r.err == nil; i++ {
		f := fmt.Sprintf("associations[%d]", i)
		var a Association
		a.Listener = r.u16()
		if r.err == nil && int(a.Listener) >= len(s.DTLSListeners) {
			r.fail(fmt.Sprintf("%s.listener %d: no such TURN-DTLS listener", f, a.Listener))
		}
		a.Client, a.Local = r.addr(), r.addr()
		a.Suite, a.Epoch = r.u16(), r.u16()
		a.LocalKey = append([]byte(nil), r.take(int(r.u8()))...)
		a.RemoteKey = append([]byte(nil), r.take(int(r.u8()))...)
		copy(a.LocalIV[:], r.take(4))
		copy(a.RemoteIV[:], r.take(4))
		a.NextSeq, a.ReplayTop, a.ReplayMask = r.u64(), r.u64(), r.u64()
		n := int(r.u8())
		if r.err == nil && n > 1 {
			r.fail(fmt.Sprintf("%s.allocations: %d, want 0 or 1", f, n))
		}
		for j := 0; j < n && r.err == nil; j++ {
			var al Allocation
			al.Key = r.alloc(&al.AllocationState, fmt.Sprintf("%s.allocations[%d]", f, j))
			if r.err == nil && al.FiveTuple.Proto != turn.ProtoDTLS {
				r.fail(fmt.Sprintf("%s.allocations[%d]: protocol %s, want DTLS", f, j, al.FiveTuple.Proto))
			}
			a.Allocations = append(a.Allocations, al)
		}
		s.Associations = append(s.Associations, a)
	}
}
