// Package e2e tests the real ternd binary from the outside: it builds
// cmd/ternd, starts it on loopback with a config file, and drives it with
// independent TURN clients (pion/turn and coturn's turnutils_uclient).
//
// The harness can start coturn's turnserver instead of ternd, with
// equivalent settings (TERN_E2E_TARGET=coturn). That checks the tests
// themselves: a test that fails against coturn is suspect before ternd is.
//
// All traffic stays on 127.0.0.0/8; every server, peer and client is
// bounded in time and stopped by the test that started it.
package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/internal/testenv"
)

// The static credentials and realm of the default test config; the realm
// is STUNner's default, which is also what clients expect from ternd.
const (
	testRealm    = "stunner.l7mp.io"
	testUser     = "user"
	testPassword = "pass"
)

const (
	readyTimeout = 10 * time.Second // start to /ready
	stopTimeout  = 5 * time.Second  // SIGTERM to exit, then SIGKILL
)

// target selects the server under test: "" or "ternd" (the default), or
// "coturn" for coturn's turnserver configured like ternd.
var target = os.Getenv("TERN_E2E_TARGET")

func targetIsCoturn() bool { return target == "coturn" }

// binDir holds the ternd binary built for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tern-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	apiServer.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// terndBinary builds cmd/ternd once per test binary and returns its path.
// The build is lazy so that `go test -list` and tests that start no server
// (and the coturn target) do not pay for it.
func terndBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(binDir, "ternd")
	buildOnce.Do(func() {
		// go test puts its own GOROOT/bin first in PATH, so this is the
		// same toolchain that builds the test.
		build := exec.Command("go", "build", "-o", path, "github.com/tern-gw/tern/cmd/ternd")
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build does
		out, err := build.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ternd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return path
}

// config mirrors the YAML keys of ternd's config file (dataplane/config).
// It is a copy on purpose: these tests check the file format ternd
// documents, so a renamed key in the Go package must break them.
type config struct {
	Version   string     `json:"version"`
	STUNMode  bool       `json:"stunMode,omitempty"`
	Admin     admin      `json:"admin"`
	Auth      auth       `json:"auth"`
	Listeners []listener `json:"listeners"`
	Clusters  []cluster  `json:"clusters,omitempty"`
	Relay     relay      `json:"relay"`
	Limits    limits     `json:"limits"`
	// Alternates is the top-level redirect list; scripts outside the
	// project write this key, so its name is part of the format.
	Alternates []string `json:"alternates,omitempty"`
	// Offload is offload.engine and offload.interfaces.
	Offload map[string]any `json:"offload,omitempty"`
}

type admin struct {
	Name           string `json:"name,omitempty"`
	LogLevel       string `json:"logLevel,omitempty"`
	MetricsAddress string `json:"metricsAddress,omitempty"`
	HealthAddress  string `json:"healthAddress,omitempty"`
	HandoverSocket string `json:"handoverSocket,omitempty"`
}

type auth struct {
	Type         string `json:"type"`
	Realm        string `json:"realm"`
	Username     string `json:"username,omitempty"`
	Password     string `json:"password,omitempty"`
	SharedSecret string `json:"sharedSecret,omitempty"`
}

type listener struct {
	Name     string   `json:"name"`
	Protocol string   `json:"protocol"`
	Address  string   `json:"address"`
	Port     int      `json:"port"`
	Routes   []string `json:"routes,omitempty"`
	Cert     string   `json:"cert,omitempty"`
	Key      string   `json:"key,omitempty"`
}

type cluster struct {
	Name      string   `json:"name"`
	Endpoints []string `json:"endpoints"`
}

type relay struct {
	Address string `json:"address,omitempty"`
	MinPort int    `json:"minPort,omitempty"`
	MaxPort int    `json:"maxPort,omitempty"`
}

type limits struct {
	MaxLifetime           int `json:"maxLifetime,omitempty"`
	StateBudgetMiB        int `json:"stateBudgetMiB,omitempty"`
	ConnectionIdleTimeout int `json:"connectionIdleTimeout,omitempty"`
	ConnectionsPerIP      int `json:"connectionsPerIP,omitempty"`
	MaxConnections        int `json:"maxConnections,omitempty"`
	PartialFrameTimeout   int `json:"partialFrameTimeout,omitempty"`
	MaxAllocations        int `json:"maxAllocations,omitempty"`

	AllocationImbalancePercent int `json:"allocationImbalancePercent,omitempty"`
}

// server is a running TURN server under test.
type server struct {
	cfg  config
	addr *net.UDPAddr // the TURN-UDP listener
	// healthURL and metricsURL are "http://host:port"; empty when the
	// target has no such endpoint (coturn).
	healthURL  string
	metricsURL string
	out        *testenv.LockedBuffer // the process's stdout and stderr

	cmd       *exec.Cmd
	cfgPath   string        // ternd's config file
	done      chan struct{} // closed when the process has exited
	waitErr   error         // cmd.Wait's result, valid once done is closed
	signalled bool          // the test itself sent a signal
}

// defaultConfig is the base test config: one TURN-UDP listener
// on a free loopback port, static credentials, peers limited to
// 127.0.0.1/32, and a random 1000-port relay window in 20000-29999 so that
// concurrent test processes rarely compete for relay ports.
func defaultConfig(t *testing.T) config {
	t.Helper()
	// Hold every probe socket until all ports are picked, so no two of
	// them get the same port.
	turnPort, closeTURN := freePort(t, "udp4")
	healthPort, closeHealth := freePort(t, "tcp4")
	metricsPort, closeMetrics := freePort(t, "tcp4")
	closeTURN()
	closeHealth()
	closeMetrics()
	lo := 20000 + rand.IntN(9001)
	return config{
		Version: "v1",
		Admin: admin{
			Name: "e2e",
			// debug: a failing test prints ternd's output, and the reason a
			// request was refused is logged at debug level.
			LogLevel:       "debug",
			MetricsAddress: "127.0.0.1:" + strconv.Itoa(metricsPort),
			HealthAddress:  "127.0.0.1:" + strconv.Itoa(healthPort),
		},
		Auth: auth{Type: "static", Realm: testRealm, Username: testUser, Password: testPassword},
		Listeners: []listener{{
			Name: "udp", Protocol: "TURN-UDP", Address: "127.0.0.1", Port: turnPort, Routes: []string{"local"},
		}},
		Clusters: []cluster{{Name: "local", Endpoints: []string{"127.0.0.1/32"}}},
		Relay:    relay{Address: "127.0.0.1", MinPort: lo, MaxPort: lo + 999},
		Limits:   limits{MaxLifetime: 600},
	}
}

// handedOut holds every port freePort has returned in this process: the
// kernel may hand a port it just took back to the next bind(0), and two
// listeners of one config must not get one number.
var handedOut struct {
	sync.Mutex
	ports map[string]bool
}

// freePort returns a port the kernel just handed out on 127.0.0.1 for
// network ("udp4" or "tcp4") that no earlier call in this process returned,
// and a function that releases it.
func freePort(t *testing.T, network string) (int, func()) {
	t.Helper()
	for {
		port, release := kernelPort(t, network)
		key := network + "/" + strconv.Itoa(port)
		handedOut.Lock()
		if handedOut.ports == nil {
			handedOut.ports = map[string]bool{}
		}
		fresh := !handedOut.ports[key]
		handedOut.ports[key] = true
		handedOut.Unlock()
		if fresh {
			return port, release
		}
		release()
	}
}

func kernelPort(t *testing.T, network string) (int, func()) {
	t.Helper()
	switch network {
	case "udp4":
		c, err := net.ListenPacket(network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return c.LocalAddr().(*net.UDPAddr).Port, func() { c.Close() }
	default:
		l, err := net.Listen(network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l.Addr().(*net.TCPAddr).Port, func() { l.Close() }
	}
}

// startTernd starts the server under test with the default config changed
// by mutate (which may be nil), waits until it is ready and stops it when
// the test ends. Despite its name it starts coturn under
// TERN_E2E_TARGET=coturn.
func startTernd(t *testing.T, mutate func(*config)) *server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := launchServer(t, mutate)
		err := waitServerReady(s)
		inUse := strings.Contains(s.out.String(), "address already in use")
		if err == nil && !inUse {
			return s
		}
		if err == nil { // ready, serving all listeners but the one whose port was taken
			s.stop(t)
			err = errors.New("a listener's port was taken")
		}
		// A port defaultConfig picked was taken by another test package
		// before the server bound it: pick new ones rather than fail.
		if attempt < 3 && inUse {
			s.signalled = true // its exit is expected: the cleanup must not fail the test for it
			t.Logf("attempt %d: %v; starting again on new ports", attempt, err)
			continue
		}
		t.Fatal(err)
	}
}

// waitServerReady waits up to readyTimeout for s to be ready and returns
// why it is not: the process exited, or the last readiness error.
func waitServerReady(s *server) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if s.exited() {
			return fmt.Errorf("%s exited before it was ready: %v", s.name(), s.waitErr)
		}
		err := s.ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", s.name(), readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// launchServer starts the server under test with the default config
// changed by mutate and stops it when the test ends; it does not wait.
func launchServer(t *testing.T, mutate func(*config)) *server {
	t.Helper()
	cfg := defaultConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	l := cfg.Listeners[0]
	s := &server{
		cfg:  cfg,
		addr: &net.UDPAddr{IP: net.ParseIP(l.Address), Port: l.Port},
		out:  &testenv.LockedBuffer{},
	}
	dir := t.TempDir()
	var cmd *exec.Cmd
	switch target {
	case "", "ternd":
		raw, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "ternd.yaml")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(terndBinary(t), "-c", path, "-l", cfg.Admin.LogLevel)
		s.cfgPath = path
		if cfg.Admin.HealthAddress != "" {
			s.healthURL = "http://" + cfg.Admin.HealthAddress
		}
		if cfg.Admin.MetricsAddress != "" {
			s.metricsURL = "http://" + cfg.Admin.MetricsAddress
		}
	case "coturn":
		cmd = coturnServerCommand(t, cfg, dir)
	default:
		t.Fatalf("TERN_E2E_TARGET=%q: want ternd or coturn", target)
	}
	s.start(t, cmd)
	return s
}

// start runs cmd as the server's process, its output into s.out, and stops it when the test
// ends (logging the output if the test failed).
func (s *server) start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if s.out == nil {
		s.out = &testenv.LockedBuffer{}
	}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("%s output:\n%s", s.name(), s.out.String())
		}
	})
}

// waitBinding waits until s.addr answers a STUN Binding, for servers without a health
// endpoint, and fails the test if the process exits first.
func (s *server) waitBinding(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, readyTimeout, func() error {
		if s.exited() {
			t.Fatalf("%s exited: %v", s.name(), s.waitErr)
		}
		return stunBinding(s.addr, 200*time.Millisecond)
	})
}

func (s *server) name() string { return filepath.Base(s.cmd.Path) }

// exited reports whether the server process has exited.
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit and returns its exit error.
func (s *server) waitExit(d time.Duration) (exited bool, err error) {
	select {
	case <-s.done:
		return true, s.waitErr
	case <-time.After(d):
		return false, nil
	}
}

// signal sends sig to the server process (and tells stop not to mind that
// it exits).
func (s *server) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	s.signalled = true
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// drainWait is how long stop lets ternd drain after SIGTERM before it
// sends the second signal that makes it exit at once.
const drainWait = 2 * time.Second

// stop ends the server at the end of a test, the way Kubernetes would:
// SIGTERM, which makes ternd drain (refuse new allocations and exit when
// the last one is gone); if allocations are still left after drainWait
// (clients like turnutils_uclient leave some), a second SIGTERM, which ternd
// documents as "exit at once"; SIGKILL stopTimeout later. ternd must exit
// with status 0 and must not have exited on its own during the test.
// TestShutdown covers the signals in detail.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if s.exited() {
		if !s.signalled && !targetIsCoturn() {
			t.Errorf("ternd exited during the test: %v", s.waitErr)
		}
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	exited, err := s.waitExit(drainWait)
	if !exited {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		exited, err = s.waitExit(stopTimeout)
	}
	if !exited {
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("%s (pid %d) still running %v after the second SIGTERM; killed", s.name(), s.cmd.Process.Pid, stopTimeout)
		return
	}
	if err != nil && !targetIsCoturn() {
		t.Errorf("ternd did not exit cleanly on SIGTERM: %v", err)
	}
}

// ready returns nil when the server is ready: ternd's /ready answers 200, or for a target
// without health endpoint, the TURN port answers a STUN Binding request.
func (s *server) ready() error {
	if s.healthURL != "" {
		code, _, err := httpGet(s.healthURL + "/ready")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /ready: status %d", code)
		}
		return err
	}
	return stunBinding(s.addr, 200*time.Millisecond)
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func httpGet(url string) (int, string, error) {
	res, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(res.Body)
	return res.StatusCode, b.String(), err
}

// metric returns the sum of the samples of a metric (over all label sets)
// on /metrics, and whether the metric was there at all.
func (s *server) metric(t *testing.T, name string) (float64, bool) {
	t.Helper()
	code, body, err := httpGet(s.metricsURL + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, %v", code, err)
	}
	var sum float64
	found := false
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			t.Fatalf("/metrics: bad sample %q: %v", line, err)
		}
		sum += v
		found = true
	}
	return sum, found
}

// waitMetric polls /metrics until the metric has the value want (bounded).
func (s *server) waitMetric(t *testing.T, name string, want float64, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		v, ok := s.metric(t, name)
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		if v != want {
			return fmt.Errorf("%s = %v, want %v", name, v, want)
		}
		return nil
	})
}

// waitMetricAtLeast waits until the gauge or counter name reaches want.
// turnutils_uclient under load sometimes opens more allocations than its -m
// clients (it retries a TLS handshake it gave up on), so its tests ask for a floor.
func (s *server) waitMetricAtLeast(t *testing.T, name string, want float64, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		v, ok := s.metric(t, name)
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		if v < want {
			return fmt.Errorf("%s = %v, want at least %v", name, v, want)
		}
		return nil
	})
}

// stunBinding sends a STUN Binding request to addr and waits for a success
// response carrying XOR-MAPPED-ADDRESS.
func stunBinding(addr *net.UDPAddr, timeout time.Duration) error {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer c.Close()
	req := stun.MustBuild(stun.TransactionID, stun.BindingRequest, stun.Fingerprint)
	if _, err := c.WriteTo(req.Raw, addr); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	res := &stun.Message{Raw: buf[:n]}
	if err := res.Decode(); err != nil {
		return err
	}
	if res.TransactionID != req.TransactionID || res.Type != stun.BindingSuccess {
		return fmt.Errorf("unexpected binding response %v", res)
	}
	var xma stun.XORMappedAddress
	return xma.GetFrom(res)
}

// coturnServerCommand is turnserver with the settings of cfg: same
// listener, relay range, realm, credentials and lifetime cap. coturn has no
// deny-by-default, so it denies all of IPv4 and allows the cluster
// endpoints (an address both allowed and denied is allowed); loopback peers
// need --allow-loopback-peers on top.
func coturnServerCommand(t *testing.T, cfg config, dir string) *exec.Cmd {
	t.Helper()
	bin, err := exec.LookPath("turnserver")
	if err != nil {
		t.Fatalf("TERN_E2E_TARGET=coturn: %v (run hack/test-deps.sh)", err)
	}
	l := cfg.Listeners[0]
	args := []string{
		"-n", "--no-cli", "--no-tls", "--no-dtls", "--no-tcp", "--no-tcp-relay",
		"--listening-ip=" + l.Address, "--listening-port=" + strconv.Itoa(l.Port),
		"--relay-ip=" + cfg.Relay.Address,
		"--min-port=" + strconv.Itoa(cfg.Relay.MinPort), "--max-port=" + strconv.Itoa(cfg.Relay.MaxPort),
		"--realm=" + cfg.Auth.Realm,
		"--pidfile=" + filepath.Join(dir, "turnserver.pid"),
		"--userdb=" + filepath.Join(dir, "turndb"),
		"--log-file=stdout", "--simple-log",
		"--allow-loopback-peers", "--denied-peer-ip=0.0.0.0-255.255.255.255",
	}
	if cfg.Limits.MaxLifetime > 0 {
		args = append(args, "--max-allocate-lifetime="+strconv.Itoa(cfg.Limits.MaxLifetime))
	}
	switch cfg.Auth.Type {
	case "static":
		args = append(args, "--lt-cred-mech", "--user="+cfg.Auth.Username+":"+cfg.Auth.Password)
	case "ephemeral":
		args = append(args, "--use-auth-secret", "--static-auth-secret="+cfg.Auth.SharedSecret)
	default:
		t.Fatalf("coturn target: auth type %q not mapped", cfg.Auth.Type)
	}
	for _, c := range cfg.Clusters {
		for _, ep := range c.Endpoints {
			args = append(args, "--allowed-peer-ip="+ipRange(t, ep))
		}
	}
	return exec.Command(bin, args...)
}

// ipRange turns "10.0.0.0/24" into coturn's "10.0.0.0-10.0.0.255".
func ipRange(t *testing.T, ep string) string {
	t.Helper()
	if !strings.Contains(ep, "/") {
		return ep
	}
	p, err := netip.ParsePrefix(ep)
	if err != nil || !p.Addr().Is4() {
		t.Fatalf("coturn target: endpoint %q: want an IPv4 address or prefix", ep)
	}
	first := p.Masked().Addr().As4()
	n := binary.BigEndian.Uint32(first[:]) | uint32(1<<(32-p.Bits())-1)
	var last [4]byte
	binary.BigEndian.PutUint32(last[:], n)
	if p.Bits() == 32 {
		return p.Addr().String()
	}
	return netip.AddrFrom4(first).String() + "-" + netip.AddrFrom4(last).String()
}

// peer is a UDP echo peer on loopback that counts what it receives.
type peer struct {
	conn *net.UDPConn
	addr *net.UDPAddr

	mu      sync.Mutex
	packets int
	sources map[string]int // source address -> packets
	flushed chan struct{}  // gets a value when the peer reads flushMarker
}

// flushMarker is the datagram flush sends; the peer neither counts nor echoes it.
const flushMarker = "tern-e2e flush marker"

const (
	peerLifetime   = 2 * time.Minute // a peer stops by itself after this
	peerMaxPackets = 100000          // and after this many datagrams
)

// startEchoPeer starts a UDP echo peer on addr ("127.0.0.1:0" or
// "[::1]:0" for any port), which counts what it receives and sends each
// datagram back.
func startEchoPeer(t *testing.T, addr string) *peer {
	t.Helper()
	network := "udp4"
	if strings.HasPrefix(addr, "[") {
		network = "udp6"
	}
	ua, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP(network, ua)
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{conn: c, addr: c.LocalAddr().(*net.UDPAddr), sources: map[string]int{}, flushed: make(chan struct{}, 1)}
	_ = c.SetDeadline(time.Now().Add(peerLifetime))
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for i := 0; i < peerMaxPackets; i++ {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return // closed, or peerLifetime is over
			}
			if string(buf[:n]) == flushMarker {
				p.flushed <- struct{}{}
				continue
			}
			p.mu.Lock()
			p.packets++
			p.sources[from.String()]++
			p.mu.Unlock()
			_, _ = c.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return p
}

// flush returns once the peer has read every datagram that reached its socket before the
// call: it sends flushMarker from a socket of its own and waits until the peer reads it, which
// it does after everything queued ahead of it. Checks that something did not arrive use it
// instead of sleeping.
func (p *peer) flush(t *testing.T) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(flushMarker)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.flushed:
	case <-time.After(5 * time.Second):
		t.Fatalf("peer %v did not read the flush marker within 5 s", p.addr)
	}
}

// received returns how many datagrams the peer got and from whom.
func (p *peer) received() (int, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	src := make(map[string]int, len(p.sources))
	for k, v := range p.sources {
		src[k] = v
	}
	return p.packets, src
}

// TestHealthAndMetrics checks ternd's health and metrics endpoints: /live
// and /ready answer 200 and /metrics carries STUNner's allocation gauge,
// at 0 on a fresh server.
func TestHealthAndMetrics(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn has no /live, /ready or STUNner metrics")
	}
	s := startTernd(t, nil)
	for _, path := range []string{"/live", "/ready"} {
		code, body, err := httpGet(s.healthURL + path)
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s: status %d, body %q, err %v; want 200", path, code, body, err)
		}
	}
	v, ok := s.metric(t, "stunner_allocations_active")
	if !ok || v != 0 {
		t.Errorf("stunner_allocations_active = %v (present %v), want 0", v, ok)
	}
	// The TURN port answers STUN Binding without credentials.
	if err := stunBinding(s.addr, time.Second); err != nil {
		t.Errorf("STUN Binding to %v: %v", s.addr, err)
	}
}

// TestShutdown checks that ternd exits promptly with status 0 on SIGINT
// (with or without allocations) and on SIGTERM when it has no allocations.
func TestShutdown(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's signal handling")
	}
	for _, tc := range []struct {
		name       string
		allocation bool
		sig        syscall.Signal
	}{
		{"SIGTERM without allocations", false, syscall.SIGTERM},
		{"SIGINT without allocations", false, syscall.SIGINT},
		{"SIGINT with an allocation", true, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startTernd(t, nil)
			if tc.allocation {
				newPionClient(t, s, testUser, testPassword).allocate(t)
			}
			s.signal(t, tc.sig)
			exited, err := s.waitExit(stopTimeout)
			if !exited {
				t.Fatalf("ternd still running %v after %v", stopTimeout, tc.sig)
			}
			if err != nil {
				t.Errorf("ternd exit after %v: %v, want status 0", tc.sig, err)
			}
		})
	}
}

// TestSIGTERMDrains checks graceful shutdown with a live allocation: after
// SIGTERM ternd reports not ready, refuses new allocations, keeps relaying
// for the existing one, and exits with status 0 once it is released.
func TestSIGTERMDrains(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's signal handling")
	}
	s := startTernd(t, nil)
	echo := startEchoPeer(t, "127.0.0.1:0")
	c := newPionClient(t, s, testUser, testPassword)
	relayConn := c.allocate(t)
	roundTrips(t, relayConn, echo.addr, 1)

	s.signal(t, syscall.SIGTERM)
	testenv.Eventually(t, 2*time.Second, func() error {
		if s.ready() == nil {
			return errors.New("/ready still 200 after SIGTERM, want it to drop while draining")
		}
		return nil
	})
	if s.exited() {
		t.Fatalf("ternd exited on SIGTERM with an allocation left (%v), want it to drain", s.waitErr)
	}
	roundTrips(t, relayConn, echo.addr, 5)
	if _, err := newPionClient(t, s, testUser, testPassword).Allocate(); err == nil {
		t.Error("Allocate succeeded while draining, want it refused")
	} else {
		t.Logf("Allocate while draining: %v", err)
	}

	if err := relayConn.Close(); err != nil {
		t.Fatal(err)
	}
	exited, err := s.waitExit(stopTimeout)
	if !exited {
		t.Fatalf("ternd still draining %v after its last allocation was released", stopTimeout)
	}
	if err != nil {
		t.Errorf("ternd exit after draining: %v, want status 0", err)
	}
}
