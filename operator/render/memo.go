package render

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	"github.com/tern-gw/tern/dataplane/config"
)

// Memo remembers, across Renders, the marshalled and checked dataplane config of each config
// rendered: most of a render's CPU time goes to turning each Gateway's config into the YAML of
// its ConfigMap and checking that ternd will accept it, and a change to one
// EndpointSlice leaves every other Gateway's config as it was. It is keyed by a SHA-256 of the
// config's JSON, which determines the YAML (MarshalConfig writes the JSON as YAML), so a
// Render with a Memo returns exactly what it returns without one.
//
// It keeps the entries used by the last two Renders and forgets the rest, so its size follows
// the number of Gateways, not the number of changes. Safe for concurrent use; the zero value
// is ready to use.
type Memo struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]memoEntry
}

type memoEntry struct {
	data []byte // shared: callers must not modify it
	err  error
}

// rotate starts a Render: what the Render before last used and the last one did not is
// forgotten.
func (m *Memo) rotate() {
	m.mu.Lock()
	m.prev, m.cur = m.cur, make(map[[sha256.Size]byte]memoEntry, len(m.cur))
	m.mu.Unlock()
}

// marshalChecked returns MarshalConfig(cfg) and checkRendered's verdict on it, from the memo
// when a config with the same JSON was marshalled and checked before.
func (m *Memo) marshalChecked(cfg *config.Config) ([]byte, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return marshalChecked(cfg)
	}
	key := sha256.Sum256(js)
	m.mu.Lock()
	e, ok := m.cur[key]
	if !ok {
		if e, ok = m.prev[key]; ok {
			m.cur[key] = e
		}
	}
	m.mu.Unlock()
	if ok {
		return e.data, e.err
	}
	data, err := jsonToYAML(js)
	if err != nil {
		return marshalChecked(cfg)
	}
	// data is js in YAML, so parsing js is parsing data, at a fraction of
	// the cost (TestGolden renders with and without a Memo and wants the
	// same bytes and problems; FuzzParseJSON holds the two parsers to one
	// verdict).
	e = memoEntry{data: data, err: checkRenderedJSON(js)}
	m.mu.Lock()
	if m.cur == nil {
		m.cur = map[[sha256.Size]byte]memoEntry{}
	}
	m.cur[key] = e
	m.mu.Unlock()
	return e.data, e.err
}

// marshalChecked is MarshalConfig followed by checkRendered, without a memo.
func marshalChecked(cfg *config.Config) ([]byte, error) {
	data, err := MarshalConfig(cfg)
	if err == nil {
		err = checkRendered(data)
	}
	return data, err
}
