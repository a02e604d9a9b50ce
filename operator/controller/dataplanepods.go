package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tern-gw/tern/operator/render"
)

// podIPIndex indexes the cached dataplane pods by the addresses of their
// status.podIPs, for the pods that run: those not finished (Succeeded,
// Failed) nor being deleted. A Pending pod counts once it has its IPs: its
// sandbox, holding the address, exists, and the kubelet may report the
// containers' start after ternd, started, has already asked for its config.
const podIPIndex = "tern.status.podIPs.running"

// DataplanePods tells which Gateways an address is a running dataplane pod
// of (podIPIndex), from the operator's cache of the pods it rendered (CacheOptions
// caches those labelled managedBy), indexed by pod IP: no request to the
// API server per lookup. It implements operator/cds.Clients.
type DataplanePods struct{ cache client.Reader }

// IndexDataplanePods adds the pod IP index to mgr's cache; call it before
// mgr starts. The operator needs pods get, list and watch (its ClusterRole).
func IndexDataplanePods(ctx context.Context, mgr manager.Manager) (*DataplanePods, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podIPIndex, runningPodIPs); err != nil {
		return nil, fmt.Errorf("index pods by IP: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, hostNetworkIndex, runningHostNetwork); err != nil {
		return nil, fmt.Errorf("index hostNetwork pods: %w", err)
	}
	return &DataplanePods{cache: mgr.GetCache()}, nil
}

// runningPodIPs are the index keys of a pod: its status.podIPs, in
// netip's canonical text, while it runs (podIPIndex).
func runningPodIPs(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil || (pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending) {
		return nil
	}
	var keys []string
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			keys = append(keys, a.Unmap().String())
		}
	}
	return keys
}

// hostNetworkIndex indexes the running (podIPIndex) hostNetwork dataplane
// pods under "true".
const hostNetworkIndex = "tern.spec.hostNetwork.running"

func runningHostNetwork(o client.Object) []string {
	if pod, ok := o.(*corev1.Pod); ok && pod.Spec.HostNetwork && len(runningPodIPs(pod)) > 0 {
		return []string{"true"}
	}
	return nil
}

// Gateways returns the Gateways ("namespace/name") whose running dataplane
// pods have the address ip: the pods the operator rendered for a Gateway
// carry its name and namespace as labels (render.LabelGatewayName,
// render.LabelGatewayNamespace) and live in its namespace; a pod whose
// labels name a Gateway of another namespace counts for none. A
// hostNetwork pod's pod IP is its node's address.
//
// An address that is no dataplane pod's gets the Gateways that have running
// hostNetwork pods: a hostNetwork pod's connection to the Service's
// ClusterIP is masqueraded by kube-proxy (its source is outside the
// cluster's pod CIDR) to its node's address on the way to the operator's
// pod, such as the CNI bridge's, which no pod or Node object names. Those
// Gateways are thus checked no further than the NetworkPolicy does
// (docs/security.md). The error is the cache's (not synced yet, or
// stopped).
func (d *DataplanePods) Gateways(ctx context.Context, ip netip.Addr) ([]string, error) {
	var pods corev1.PodList
	if err := d.cache.List(ctx, &pods, client.MatchingFields{podIPIndex: ip.Unmap().String()}); err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		if err := d.cache.List(ctx, &pods, client.MatchingFields{hostNetworkIndex: "true"}); err != nil {
			return nil, err
		}
	}
	var ids []string
	for i := range pods.Items {
		p := &pods.Items[i]
		name, ns := p.Labels[render.LabelGatewayName], p.Labels[render.LabelGatewayNamespace]
		if name == "" || ns != p.Namespace || p.Labels[render.LabelApp] != render.LabelAppValue {
			continue
		}
		if id := ns + "/" + name; !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
