package dataplane

import (
	"net"
	"strconv"
	"testing"
)

// TestStartMovesTakenPorts: when another socket holds a listener's port
// at bind time, startWith moves the config to free ports and the server
// starts, with TLS and DTLS still sharing one number. Without it a port
// taken between freePort and the bind fails an unrelated test.
func TestStartMovesTakenPorts(t *testing.T) {
	cfg := connConfig(t, 24720, 24729, nil)
	tls := listenerNamed(t, cfg, "tls")
	held, err := net.Listen("tcp4", net.JoinHostPort(tls.Address, strconv.Itoa(tls.Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	startWith(t, cfg)
	moved, dtls := listenerNamed(t, cfg, "tls"), listenerNamed(t, cfg, "dtls")
	if moved.Port == tls.Port {
		t.Fatalf("TLS listener still on the held port %d", tls.Port)
	}
	if moved.Port != dtls.Port {
		t.Errorf("TLS on %d and DTLS on %d, want one port", moved.Port, dtls.Port)
	}
	c, err := net.Dial("tcp4", addrOf(moved))
	if err != nil {
		t.Fatalf("the moved TLS listener: %v", err)
	}
	c.Close()
}
