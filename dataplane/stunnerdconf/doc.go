// Package stunnerdconf reads the two ways a standalone STUNner user starts
// stunnerd, so that ternd runs from what they already have: stunnerd's own
// config file (STUNner's v1 API, "stunnerd.conf"; Detect tells it from
// Tern's format, Parse reads it) and the positional "turn://user:pass@
// address:port?transport=udp" URI (ParseTURNURI).
//
// Both build a typed config.Config and ready it with config.Prepare, the
// steps config.Parse takes after decoding (placeholders, defaults,
// validation), so there is one set of checks for every way a config comes
// in. The package lives on ternd's side of the contract, not in
// dataplane/config: only ternd reads these formats, so tern-operator, which
// links the contract to render and check configs, does not link them (the
// import rules of docs/architecture.md let cmd/tern-operator import no
// dataplane package but dataplane/config). It sits under dataplane/ beside
// dataplane/k8sconfig, ternd's other source of configs, rather than in
// cmd/ternd, so that it is a small package with its own tests and fuzz
// targets (FuzzParseStunnerd, FuzzParseTURNURI; seeds in testdata/fuzz).
package stunnerdconf
