package record

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"
)

// Keys gathers, for one association, what the record layer needs
// to derive its keys (RFC 5246 §6.3), from pion/dtls's public surface and
// the wire only, so that no pion release can change it behind our back by
// renaming a private field:
//
//   - the client random and master secret from Config.KeyLogWriter, which
//     pion writes once the master secret is known, in the NSS key log
//     format: "CLIENT_RANDOM <32 bytes hex> <48 bytes hex>\n";
//   - the server random and the cipher suite from the ServerHello pion
//     sends through the association (handshake records of epoch 0 are in
//     the clear);
//   - the epoch and sequence number of the last record pion sent (record
//     headers are in the clear at every epoch), so that Tern's sequence
//     numbers start past pion's.
//
// mu is a leaf lock: nothing is called while it is held.
type Keys struct {
	mu           sync.Mutex
	clientRandom [32]byte
	serverRandom [32]byte
	master       []byte
	suite        uint16
	hello        bool   // serverRandom and suite are set
	epoch        uint16 // highest epoch pion sent a record at
	seq          uint64 // highest sequence number pion sent at epoch
}

// keyLogLabel is the NSS key log label of a TLS 1.2 (and DTLS 1.2) master
// secret.
const keyLogLabel = "CLIENT_RANDOM"

// Write takes the key log lines pion/dtls writes (Config.KeyLogWriter) and
// keeps the master secret; lines with another label are ignored. It
// returns an error, which pion only logs, for a malformed line.
func (k *Keys) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		f := bytes.Fields(line)
		if len(f) != 3 || string(f[0]) != keyLogLabel {
			continue
		}
		var cr [32]byte
		if hex.DecodedLen(len(f[1])) != len(cr) {
			return 0, errors.New("key log: client random of the wrong length")
		}
		if _, err := hex.Decode(cr[:], f[1]); err != nil {
			return 0, err
		}
		master := make([]byte, hex.DecodedLen(len(f[2])))
		if _, err := hex.Decode(master, f[2]); err != nil {
			return 0, err
		}
		k.mu.Lock()
		k.clientRandom, k.master = cr, master
		k.mu.Unlock()
	}
	return len(p), nil
}

// DTLS record and handshake header layout (RFC 6347 §4.1, §4.2.2).
const (
	handshakeHeader    = 12 // type, length, message_seq, fragment_offset, fragment_length
	handshakeHello     = 2  // ServerHello
	helloRandomOffset  = 2  // after server_version
	helloSessionOffset = helloRandomOffset + 32
)

// observe reads the records of one datagram pion/dtls sends: it notes the
// highest epoch and sequence number and takes the server random and cipher
// suite from a ServerHello. Malformed input is ignored: the datagram is
// pion's own and goes out unchanged.
func (k *Keys) Observe(d []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(d) >= Header {
		typ := d[0]
		es := binary.BigEndian.Uint64(d[3:11])
		epoch, seq := uint16(es>>48), es&maxSeq
		n := int(binary.BigEndian.Uint16(d[11:13]))
		if len(d) < Header+n {
			return
		}
		if epoch > k.epoch || (epoch == k.epoch && seq > k.seq) {
			k.epoch, k.seq = epoch, seq
		}
		if typ == ContentHandshake && epoch == 0 {
			k.serverHello(d[Header : Header+n])
		}
		d = d[Header+n:]
	}
}

// serverHello takes the random and cipher suite of a ServerHello that a
// handshake record carries whole (pion never fragments it: it is far below
// the MTU).
func (k *Keys) serverHello(h []byte) {
	if len(h) < handshakeHeader || h[0] != handshakeHello {
		return
	}
	fragOff := uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])
	fragLen := int(uint32(h[9])<<16 | uint32(h[10])<<8 | uint32(h[11]))
	body := h[handshakeHeader:]
	if fragOff != 0 || fragLen > len(body) {
		return
	}
	body = body[:fragLen]
	if len(body) < helloSessionOffset+1 {
		return
	}
	sid := int(body[helloSessionOffset])
	cs := helloSessionOffset + 1 + sid
	if len(body) < cs+2 {
		return
	}
	copy(k.serverRandom[:], body[helloRandomOffset:helloSessionOffset])
	k.suite = binary.BigEndian.Uint16(body[cs:])
	k.hello = true
}

// Inputs is a snapshot of what Keys gathered.
type Inputs struct {
	clientRandom, serverRandom [32]byte
	master                     []byte
	suite                      uint16
	epoch                      uint16
	seq                        uint64
}

// inputs returns what was gathered, or an error when the handshake did not
// show all of it (no key log line or no ServerHello seen).
func (k *Keys) Inputs() (Inputs, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.master) == 0 || !k.hello {
		return Inputs{}, errors.New("dtls handshake: master secret or ServerHello not seen")
	}
	return Inputs{clientRandom: k.clientRandom, serverRandom: k.serverRandom, master: k.master,
		suite: k.suite, epoch: k.epoch, seq: k.seq}, nil
}
