//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The selectorless Service of testdata/toggled-peer.yaml whose one EndpointSlice the test
// writes, and the bound on one propagation (generous: a loaded 2-core machine; the measured
// figures go to BENCHMARKS.md, they are not asserted).
const (
	toggledService   = "toggled-peer"
	toggledSlice     = "toggled-peer-e2e"
	propagationBound = 10 * time.Second
	propagationProbe = 5 * time.Millisecond // pause between probes
)

// measurePropagation measures n config propagations through the whole config path: an
// EndpointSlice of the toggled-peer Service (a UDPRoute backend) is written with peer's
// address, then without it, n times each; the operator re-renders the Gateway's ConfigMap and
// ternd reloads it. An add's propagation is the time from just before the EndpointSlice write
// until a pion client of server, whose permission to peer was refused (403), relays to the
// echo on peer; a removal's is the time until a CreatePermission for peer is refused (403;
// ternd revokes the permissions and channels it had granted in the same reconfiguration). It
// returns both series, in the order measured.
func measurePropagation(t *testing.T, server string, peer pod, n int) (adds, removals []time.Duration) {
	t.Helper()
	ctx := context.Background()
	api := clientset(t).DiscoveryV1().EndpointSlices(peer.namespace)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: toggledSlice,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: toggledService,
				discoveryv1.LabelManagedBy:   "tern-cluster-e2e",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("echo"), Port: ptr(int32(echoPort)), Protocol: ptr(corev1.ProtocolUDP)}},
	}
	slice, err := api.Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating EndpointSlice %s: %v", toggledSlice, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), toggledSlice, metav1.DeleteOptions{}) })
	write := func(endpoints []discoveryv1.Endpoint) time.Time {
		slice.Endpoints = endpoints
		start := time.Now()
		if slice, err = api.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("updating EndpointSlice %s: %v", toggledSlice, err)
		}
		return start
	}
	listed := []discoveryv1.Endpoint{{Addresses: []string{peer.ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}

	for i := range n {
		a, err := allocate(server)
		if err != nil {
			t.Fatal(err)
		}
		if err := echoVia(a.relay, peer.ip, 200*time.Millisecond); err == nil {
			a.Close()
			t.Fatalf("change %d: %s is relayable before its EndpointSlice lists it", i, peer.ip)
		}
		start := write(listed)
		for {
			err := echoVia(a.relay, peer.ip, 300*time.Millisecond) // refused at once until allowed
			if err == nil {
				adds = append(adds, time.Since(start))
				logSlow(t, "add", i, start)
				break
			}
			if time.Since(start) > propagationBound {
				a.Close()
				t.Fatalf("change %d: %s not relayable %v after its EndpointSlice listed it: %v", i, peer.ip, propagationBound, err)
			}
			time.Sleep(propagationProbe)
		}
		start = write(nil)
		for {
			err := a.client.CreatePermission(&net.UDPAddr{IP: net.ParseIP(peer.ip), Port: echoPort})
			if err != nil && strings.Contains(err.Error(), "403") {
				removals = append(removals, time.Since(start))
				logSlow(t, "removal", i, start)
				break
			}
			if time.Since(start) > propagationBound {
				a.Close()
				t.Fatalf("change %d: a permission to %s still granted %v after its EndpointSlice dropped it (%v)", i, peer.ip, propagationBound, err)
			}
			time.Sleep(propagationProbe)
		}
		a.Close()
	}
	return adds, removals
}

// logSlow logs a propagation that took over a second, with the wall-clock time of its write,
// to find it in the operator's and ternd's logs.
func logSlow(t *testing.T, what string, i int, start time.Time) {
	t.Helper()
	if d := time.Since(start); d > time.Second {
		t.Logf("slow %s %d: %v, EndpointSlice written at %s", what, i, d.Round(time.Millisecond), start.UTC().Format("15:04:05.000"))
	}
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

// summary formats a series as "n=20 p50 … p90 … p99 … max …" in milliseconds.
func summary(ds []time.Duration) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("n=%d p50 %s, p90 %s, p99 %s, max %s", len(ds),
		ms(percentile(ds, 50)), ms(percentile(ds, 90)), ms(percentile(ds, 99)), ms(slices.Max(ds)))
}

func ptr[T any](v T) *T { return &v }
