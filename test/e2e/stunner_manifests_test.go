package e2e

import (
	"bytes"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/logging"
	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"
	"sigs.k8s.io/yaml"

	dpconfig "github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

// TestStunnerManifestsRelay takes the dataplane config the renderer gives
// each Gateway of the stunner_* golden cases (operator/render/testdata:
// Tern's own equivalents of the manifests STUNner publishes in
// deploy/manifests and docs/examples), runs ternd with it on 127.0.0.1 and
// relays through each of its listeners (TURN-UDP, TURN-TCP, TURN-TLS and
// TURN-DTLS) with the pion/turn client to an echo peer. What a pod gets from its environment
// is put in by hand, the way a pod has it: listener and relay addresses
// become 127.0.0.1 on free ports, every cluster's endpoints the echo
// peer's address (the real ones are cluster IPs), credential files the
// rendered Secret's keys, certificates a self-signed one for 127.0.0.1,
// and offload is off (it needs privileges). A
// config in STUN mode is checked to answer a Binding and refuse Allocate
// with 403 instead.
func TestStunnerManifestsRelay(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn does not read Tern's rendered configs")
	}
	cases, err := filepath.Glob(filepath.Join("..", "..", "operator", "render", "testdata", "stunner_*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no stunner_* cases in operator/render/testdata")
	}
	peer := startEchoPeer(t, "127.0.0.2:0")
	for _, path := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".in.yaml"), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			in, _, err := render.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			res := render.Render(in, render.Options{})
			if len(res.Gateways) == 0 {
				t.Fatal("no Gateway rendered")
			}
			for _, g := range res.Gateways {
				if g.Config == nil {
					t.Fatalf("Gateway %s/%s: no config rendered", g.Namespace, g.Name)
				}
				t.Run(g.Name, func(t *testing.T) {
					relayRendered(t, &g, peer)
				})
			}
		})
	}
}

// relayRendered runs ternd on g's config, made local, and relays through
// each listener to peer (or, in STUN mode, checks
// that a Binding is answered and an Allocate refused).
func relayRendered(t *testing.T, g *render.GatewayResult, peer *peer) {
	raw, err := yaml.Marshal(g.Config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg dpconfig.Config // a copy: the rendering stays as it was
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	healthPort, release := freePort(t, "tcp4")
	release()
	cfg.Admin.HealthAddress = "127.0.0.1:" + strconv.Itoa(healthPort)
	cfg.Admin.MetricsAddress = ""
	cfg.Admin.LogLevel = "debug"
	cfg.Offload = dpconfig.Offload{Engine: offloadmode.None}
	// The test cases' certificate Secrets hold placeholders; a pod would
	// mount a real certificate where the config says, so this test does.
	cert, key := writeTestCert(t, dir)
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		network := "udp4"
		switch l.Protocol {
		case protocol.TURNTCP, protocol.TURNTLS:
			network = "tcp4"
		}
		port, release := freePort(t, network)
		release()
		l.Address, l.Port, l.PublicAddress, l.PublicPort = "127.0.0.1", port, "", 0
		if l.Cert != "" {
			l.Cert, l.Key = cert, key
		}
	}
	for i := range cfg.Clusters {
		cfg.Clusters[i].Type = ""
		cfg.Clusters[i].Endpoints = []string{peer.addr.IP.String()}
		cfg.Clusters[i].MinPort, cfg.Clusters[i].MaxPort = 0, 0
	}
	lo := 20000 + rand.IntN(9001)
	cfg.Relay = dpconfig.Relay{Address: "127.0.0.1", MinPort: lo, MaxPort: lo + 999}
	// The pod mounts the rendered credentials Secret; so does this test.
	if g.Secret != nil {
		for key, file := range map[string]*string{
			render.CredentialsKeyPassword:     &cfg.Auth.PasswordFile,
			render.CredentialsKeySharedSecret: &cfg.Auth.SharedSecretFile,
		} {
			if *file == "" {
				continue
			}
			*file = filepath.Join(dir, key)
			if err := os.WriteFile(*file, g.Secret.Data[key], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := yaml.Marshal(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "tern.yaml")
	if err := os.WriteFile(cfgPath, out, 0o600); err != nil {
		t.Fatal(err)
	}

	s := &server{healthURL: "http://" + cfg.Admin.HealthAddress}
	s.start(t, exec.Command(terndBinary(t), "-c", cfgPath))
	testenv.Eventually(t, readyTimeout, func() error {
		if s.exited() {
			t.Fatalf("ternd exited before it was ready: %v", s.waitErr)
		}
		return s.ready()
	})

	user, pass := credentials(t, g, &cfg)
	for _, l := range cfg.Listeners {
		t.Run(string(l.Protocol), func(t *testing.T) {
			addr := net.JoinHostPort(l.Address, strconv.Itoa(l.Port))
			c := dialTURN(t, l.Protocol, addr, user, pass)
			if cfg.STUNMode {
				if _, err := c.SendBindingRequest(); err != nil {
					t.Fatalf("STUN Binding in STUN mode: %v", err)
				}
				// pion's Allocate wants a 401 with a NONCE first; the 403
				// ends it at once with an error.
				if relay, err := c.Allocate(); err == nil {
					relay.Close()
					t.Fatal("Allocate in STUN mode succeeded")
				}
				req, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
					requestedTransportUDP, stun.Fingerprint)
				if err != nil {
					t.Fatal(err)
				}
				to, err := net.ResolveUDPAddr("udp4", addr)
				if err != nil {
					t.Fatal(err)
				}
				res, err := c.PerformTransaction(req, to, false)
				if err != nil {
					t.Fatal(err)
				}
				if code := errorCode(res.Msg); code != 403 {
					t.Fatalf("Allocate in STUN mode: error %d, want 403", code)
				}
				return
			}
			relay, err := c.Allocate()
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			defer relay.Close()
			roundTrips(t, relay, peer.addr, 3)
		})
	}
}

// credentials returns what a client presents to g's dataplane: the static
// username and password, or TURN REST API credentials minted from the
// shared secret.
func credentials(t *testing.T, g *render.GatewayResult, cfg *dpconfig.Config) (user, pass string) {
	t.Helper()
	secret := func(inline, key string) string {
		if inline != "" || g.Secret == nil {
			return inline
		}
		return string(g.Secret.Data[key])
	}
	switch cfg.Auth.Type {
	case dpconfig.AuthEphemeral:
		user, pass, err := turn.GenerateLongTermCredentials(secret(cfg.Auth.SharedSecret, render.CredentialsKeySharedSecret), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return user, pass
	default:
		return cfg.Auth.Username, secret(cfg.Auth.Password, render.CredentialsKeyPassword)
	}
}

// dialTURN returns a pion/turn client of addr over the transport of
// proto (TLS and DTLS trust any certificate: the test's is self-signed),
// closed when the test ends.
func dialTURN(t *testing.T, proto protocol.Protocol, addr, user, pass string) *turn.Client {
	t.Helper()
	var conn net.PacketConn
	switch proto {
	case protocol.TURNTCP:
		tc, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn = turn.NewSTUNConn(tc)
	case protocol.TURNTLS:
		tc, err := tls.Dial("tcp4", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // self-signed test certificate
		if err != nil {
			t.Fatal(err)
		}
		conn = turn.NewSTUNConn(tc)
	case protocol.TURNDTLS:
		raddr, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := dtls.Dial("udp4", raddr, &dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec // self-signed test certificate
		if err != nil {
			t.Fatal(err)
		}
		conn = dtlsConn{dc}
	default:
		uc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conn = uc
	}
	log := &testenv.LockedBuffer{}
	c, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: addr, TURNServerAddr: addr, Username: user, Password: pass, Realm: testRealm,
		Conn: conn, LoggerFactory: &logging.DefaultLoggerFactory{Writer: log, DefaultLogLevel: logging.LogLevelWarn},
	})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		conn.Close()
		if t.Failed() {
			t.Logf("pion client log:\n%s", log.String())
		}
	})
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	return c
}

// dtlsConn lets the pion/turn client speak over a DTLS association: each
// record is one TURN message.
type dtlsConn struct{ *dtls.Conn }

func (c dtlsConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.Read(b)
	return n, c.RemoteAddr(), err
}
func (c dtlsConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.Write(b) }
