package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

const externalNameYAML = `apiVersion: v1
kind: Namespace
metadata: {name: extname}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: extname-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: extname-config, namespace: extname}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: extname-config, namespace: extname}
spec: {dataplane: extname-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: extname-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: extname}
spec:
  gatewayClassName: extname-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: sfu, namespace: extname}
spec: {type: ExternalName, externalName: sfu.media.example.com}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: extname}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: sfu}]}]
`

// TestExternalNameBackend: a UDPRoute to an ExternalName Service is resolved (ResolvedRefs
// True) and renders a STRICT_DNS cluster of the Service's externalName, which ternd resolves
// and re-resolves; a new externalName reaches the config.
func TestExternalNameBackend(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(externalNameYAML))

	cluster := func(want string) func() error {
		return func() error {
			var cm corev1.ConfigMap
			if err := get(c, "extname", "gw", &cm); err != nil {
				return err
			}
			cfg := parseConfig(t, &cm)
			if len(cfg.Clusters) != 1 {
				return fmt.Errorf("clusters %+v, want one", cfg.Clusters)
			}
			cl := cfg.Clusters[0]
			if cl.Name != "extname/media" || cl.Type != config.ClusterStrictDNS || !slices.Equal(cl.Endpoints, []string{want}) {
				return fmt.Errorf("cluster %+v, want extname/media of type %s with endpoint %s", cl, config.ClusterStrictDNS, want)
			}
			if l := cfg.Listeners[0]; !slices.Equal(l.Routes, []string{"extname/media"}) {
				return fmt.Errorf("listener routes %v, want the cluster", l.Routes)
			}
			var rt stnrv1.UDPRoute
			if err := get(c, "extname", "media", &rt); err != nil {
				return err
			}
			return parentConditions(rt.Status.Parents, "gw", "Accepted", "ResolvedRefs")
		}
	}
	testenv.Eventually(t, waitTimeout, cluster("sfu.media.example.com"))

	var svc corev1.Service
	if err := get(c, "extname", "sfu", &svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.ExternalName = "sfu-2.media.example.com"
	if err := c.Update(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, cluster("sfu-2.media.example.com"))
}
