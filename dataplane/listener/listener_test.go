package listener

import (
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestStartUnknownProtocol: a protocol outside the table is refused with an
// error naming the listener and the protocol, before anything is opened.
func TestStartUnknownProtocol(t *testing.T) {
	l, err := Start(Env{}, config.Listener{Name: "sctp", Protocol: "TURN-SCTP", Address: "127.0.0.1", Port: 3478}, nil)
	if l != nil || err == nil || !strings.Contains(err.Error(), `"sctp"`) || !strings.Contains(err.Error(), `"TURN-SCTP"`) {
		t.Fatalf("Start = %v, %v; want an error naming listener \"sctp\" and protocol \"TURN-SCTP\"", l, err)
	}
}
