package hello

import (
	"bytes"
	"encoding/binary"
)

// Spec is a ClientHello to encode (AppendClientHello): what tests and
// floods send.
type Spec struct {
	RecordVersion [2]byte
	RecordSeq     uint64
	MessageSeq    uint16
	Random        byte // every byte of the random
	Session       []byte
	Cookie        []byte
	Suites        []uint16
	Extensions    []byte // appended as they are, after a length
}

// Default is a ClientHello as pion's client sends it first: record
// version DTLS 1.0, no cookie, two AES-GCM suites, the null compression.
func Default() Spec {
	return Spec{RecordVersion: versionDTLS10, Random: 7, Suites: []uint16{0xc02b, 0xc02f},
		Extensions: []byte{0x00, 0x17, 0x00, 0x00}} // extended_master_secret
}

// AppendClientHello encodes h as one datagram: one record, one whole
// handshake message (RFC 6347 §4.2.2, §4.3.2).
func AppendClientHello(dst []byte, h Spec) []byte {
	var body []byte
	body = append(body, versionDTLS12[0], versionDTLS12[1])
	body = append(body, bytes.Repeat([]byte{h.Random}, 32)...)
	body = append(body, byte(len(h.Session)))
	body = append(body, h.Session...)
	body = append(body, byte(len(h.Cookie)))
	body = append(body, h.Cookie...)
	body = binary.BigEndian.AppendUint16(body, uint16(2*len(h.Suites)))
	for _, s := range h.Suites {
		body = binary.BigEndian.AppendUint16(body, s)
	}
	body = append(body, 1, 0) // compression_methods: null
	if h.Extensions != nil {
		body = binary.BigEndian.AppendUint16(body, uint16(len(h.Extensions)))
		body = append(body, h.Extensions...)
	}
	n := len(body)
	dst = append(dst, 22, h.RecordVersion[0], h.RecordVersion[1])
	dst = binary.BigEndian.AppendUint64(dst, h.RecordSeq)
	dst = binary.BigEndian.AppendUint16(dst, uint16(handshakeHeaderLen+n))
	dst = append(dst, handshakeClientHello, byte(n>>16), byte(n>>8), byte(n))
	dst = binary.BigEndian.AppendUint16(dst, h.MessageSeq)
	dst = append(dst, 0, 0, 0, byte(n>>16), byte(n>>8), byte(n))
	return append(dst, body...)
}
