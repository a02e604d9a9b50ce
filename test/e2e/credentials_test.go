package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/controller"
	"github.com/tern-gw/tern/operator/render"
)

// secretVolume mirrors a Secret into dir the way kubelet keeps a Secret volume: each key is
// a symlink through ..data to a timestamped directory, and an update writes a new directory
// and renames a fresh ..data symlink over the old one.
type secretVolume struct {
	dir string
	gen int
}

// sync makes the volume hold s's data.
func (v *secretVolume) sync(t *testing.T, s *corev1.Secret) {
	t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_11_24_%02d", v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o700); err != nil {
		t.Fatal(err)
	}
	for k, val := range s.Data {
		if err := os.WriteFile(filepath.Join(v.dir, ts, k), val, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range s.Data {
		link := filepath.Join(v.dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			t.Fatal(err)
		}
	}
}

// mountRendered waits for the ConfigMap and the credentials Secret the operator renders for
// Gateway namespace/name, writes the ConfigMap's config to a file and the Secret into creds,
// as kubelet mounts them in the dataplane pod, and returns the config file's path.
func mountRendered(t *testing.T, c client.Client, namespace, name string, creds *secretVolume) string {
	t.Helper()
	var cm corev1.ConfigMap
	var s corev1.Secret
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &cm); err != nil {
			return err
		}
		return c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name + "-tern-auth"}, &s)
	})
	creds.sync(t, &s)
	cfgPath := filepath.Join(t.TempDir(), render.ConfigKey)
	if err := os.WriteFile(cfgPath, []byte(cm.Data[render.ConfigKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

// credentialsManifests: static credentials in the user's Secret, named by the GatewayConfig's
// authRef as in STUNner's reference; the route reaches the StaticService 127.0.0.2/32.
const credentialsManifests = `apiVersion: v1
kind: Namespace
metadata: {name: e2e-cred}
---
apiVersion: v1
kind: Secret
metadata: {name: turn-auth, namespace: e2e-cred}
stringData: {type: static, username: user, password: first-e2e-Password}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: e2e-cred-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: e2e-cred-config, namespace: e2e-cred}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: e2e-cred-config, namespace: e2e-cred}
spec:
  dataplane: e2e-cred-dataplane
  realm: stunner.l7mp.io
  authRef: {name: turn-auth}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: e2e-cred-dataplane}
spec: {image: ternd:e2e, disableHealthCheck: true, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: e2e-cred}
spec:
  gatewayClassName: e2e-cred-class
  listeners: [{name: udp, port: %d, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peer, namespace: e2e-cred}
spec: {prefixes: [127.0.0.2/32]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-cred}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: peer}]}]
`

// TestOperatorCredentialsFromSecret: the password a user keeps in a Secret reaches ternd
// through the operator's rendered Secret, mounted as a file, never through the ConfigMap;
// ternd runs as the rendered Deployment starts it (the ConfigMap's config as its file, the
// ConfigMap watched as the Gateway's ServiceAccount, which may read no Secret). A pion/turn
// client allocates with the Secret's password. Then the user rotates the password: the
// operator updates its Secret, kubelet's swap of the volume is replayed, and ternd takes the
// new password without a restart, while the allocation made before keeps relaying.
func TestOperatorCredentialsFromSecret(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn is not configured by the operator")
	}
	cfg := apiServer.Config(t)
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	creds := &secretVolume{dir: t.TempDir()}
	startOperator(t, creds.dir)

	port := listenerPort(t)
	testenv.Apply(t, c, fmt.Appendf(nil, credentialsManifests, port))
	cfgPath := mountRendered(t, c, "e2e-cred", "gw", creds)
	if doc, _ := os.ReadFile(cfgPath); strings.Contains(string(doc), "first-e2e-Password") {
		t.Fatalf("the ConfigMap holds the password:\n%s", doc)
	}
	kubeconfig := apiServer.ImpersonatingKubeconfig(t, "system:serviceaccount:e2e-cred:gw")
	s := startTerndFromConfigMap(t, cfgPath, kubeconfig, "e2e-cred", port)
	peer := startEchoPeer(t, "127.0.0.2:0")

	first := newPionClient(t, s, "user", "first-e2e-Password")
	relay := first.allocate(t)
	roundTrips(t, relay, peer.addr, 3)
	if _, err := newPionClient(t, s, "user", "second-e2e-Password").Allocate(); err == nil {
		t.Fatal("a password that is not in the Secret allocated")
	}

	// The user rotates the password in their Secret.
	var user corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "e2e-cred", Name: "turn-auth"}, &user); err != nil {
		t.Fatal(err)
	}
	user.Data["password"] = []byte("second-e2e-Password")
	if err := c.Update(context.Background(), &user); err != nil {
		t.Fatal(err)
	}
	var rendered corev1.Secret
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "e2e-cred", Name: "gw-tern-auth"}, &rendered); err != nil {
			return err
		}
		if got := string(rendered.Data[render.CredentialsKeyPassword]); got != "second-e2e-Password" {
			return fmt.Errorf("rendered Secret still holds %q", got)
		}
		return nil
	})
	creds.sync(t, &rendered) // kubelet's update of the pod's volume
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(s.out.String(), "credentials reloaded") {
			return fmt.Errorf("ternd has not reloaded its credentials")
		}
		return nil
	})
	second := newPionClient(t, s, "user", "second-e2e-Password")
	roundTrips(t, second.allocate(t), peer.addr, 3)
	if _, err := newPionClient(t, s, "user", "first-e2e-Password").Allocate(); err == nil {
		t.Fatal("the old password still allocates after the rotation")
	}
	roundTrips(t, relay, peer.addr, 3) // the allocation made before the rotation
	out := s.out.String()
	if n := strings.Count(out, "listener started"); n != 1 {
		t.Errorf("the listener was started %d times; a password rotation must not restart it", n)
	}
	if strings.Contains(out, "first-e2e-Password") || strings.Contains(out, "second-e2e-Password") {
		t.Errorf("a password reached ternd's log:\n%s", out)
	}
	first.assertQuiet(t)
}

// listenerPort returns a UDP port, free on every address a moment ago, for a ternd that the
// operator's rendering binds to 0.0.0.0 some seconds later. It is taken at random from
// 10000-19999, below the relay ports (20000-29999) and the kernel's ephemeral ports
// (32768-60999): a port the kernel just handed out, as freePort's, may be handed out again to
// any socket on this shared machine before the operator has rendered.
func listenerPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		port := 10000 + rand.IntN(10000)
		c, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			continue
		}
		c.Close()
		return port
	}
	t.Fatal("no free UDP port in 10000-19999")
	return 0
}
