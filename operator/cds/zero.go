package cds

import "encoding/json"

// ZeroConfig is how STUNner's config discovery service tells a watcher
// that the Gateway id ("namespace/name") is gone: a v1 config with only the
// name, static auth with STUNner's placeholder credentials, its default
// realm, and no listener or cluster. STUNner's clients recognise exactly
// this config as a deletion (its client.IsConfigDeleted), and stunnerd can
// ignore it rather than close its listeners; ternd does (cmd/ternd).
func ZeroConfig(id string) []byte {
	type admin struct {
		Name string `json:"name,omitempty"`
	}
	type auth struct {
		Type        string            `json:"type"`
		Realm       string            `json:"realm"`
		Credentials map[string]string `json:"credentials"`
	}
	b, _ := json.Marshal(struct {
		Version string `json:"version"`
		Admin   admin  `json:"admin"`
		Auth    auth   `json:"auth"`
	}{"v1", admin{id}, auth{"static", "stunner.l7mp.io", map[string]string{"username": "dummy-username", "password": "dummy-password"}}})
	return b
}
