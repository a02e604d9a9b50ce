// Package turn is Tern's TURN engine: the protocol state machine of RFC 8656
// (TURN) over RFC 8489 (STUN), with no sockets of its own.
//
// The engine is sans-IO. The dataplane hands it a packet read from a client
// (HandleClient) or from a peer on a relay socket (HandlePeer) and gets back
// what to write and where; relay sockets are created through a RelayAllocator
// the dataplane supplies. Time comes from an injected Clock, so lifetimes,
// nonce expiry and sweeping are tested without sleeping.
//
// The relayed-packet paths (ChannelData and Send indications from clients,
// UDP datagrams from peers) make no heap allocation and take no lock: the
// allocation table, permissions and channel bindings are tables of atomic
// pointers (hashed by 5-tuple or peer address, indexed by channel number),
// read with atomic loads at a cost that does not grow with their size.
// github.com/pion/stun/v2 is used only to
// encode and decode STUN messages on the request path.
package turn
