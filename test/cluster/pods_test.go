//go:build cluster

package cluster

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tern-gw/tern/internal/kubeclient"
)

// The tests poll the API server often (every 20-100 ms while they wait); a client-go request
// costs far less CPU on the shared machine than a kubectl process, so polls go through one
// client with a rate limit high enough not to slow them.
var kube struct {
	once sync.Once
	cs   kubernetes.Interface
	err  error
}

// kubeClient returns the typed client for the cluster of KUBECONFIG.
func kubeClient() (kubernetes.Interface, error) {
	kube.once.Do(func() {
		cfg, err := kubeclient.RESTConfig("")
		if err != nil {
			kube.err = err
			return
		}
		cfg.QPS, cfg.Burst = 100, 200
		kube.cs, kube.err = kubernetes.NewForConfig(cfg)
	})
	return kube.cs, kube.err
}

// clientset is kubeClient for a test: it fails t on error.
func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubeClient()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// pod is a pod's namespace, name and address, and the name and address of the node it runs on;
// ip6 is its IPv6 address from status.podIPs on the dual-stack pod network of hack/cluster.sh
// (empty for a hostNetwork pod, or a pod of an IPv4-only cluster).
type pod struct{ namespace, name, ip, node, hostIP, ip6 string }

func (p pod) String() string { return p.namespace + "/" + p.name + "@" + p.ip + " on " + p.node }

// listPods lists the pods matching selector in namespace that have an address and no
// deletion timestamp and for which keep is true.
func listPods(namespace, selector string, keep func(*corev1.Pod) bool) ([]pod, error) {
	cs, err := kubeClient()
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var pods []pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && keep(p) {
			pods = append(pods, pod{namespace, p.Name, p.Status.PodIP, p.Spec.NodeName, p.Status.HostIP, podIPv6(p)})
		}
	}
	return pods, nil
}

// podIPv6 returns p's first IPv6 address in status.podIPs, or "".
func podIPv6(p *corev1.Pod) string {
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is6() && !a.Is4In6() {
			return a.String()
		}
	}
	return ""
}

// runningPods lists the Running, not deleted pods matching selector, failing t when there are
// none.
func runningPods(t *testing.T, namespace, selector string) []pod {
	t.Helper()
	pods := runningPodsNow(namespace, selector)
	if len(pods) == 0 {
		t.Fatalf("no running pod %s in %s:\n%s", selector, namespace, kubectl(t, "-n", namespace, "get", "pods", "-o", "wide"))
	}
	return pods
}

func runningPodsNow(namespace, selector string) []pod {
	pods, _ := listPods(namespace, selector, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	return pods
}

// readyPods lists the Ready, not deleted pods matching selector.
func readyPods(namespace, selector string) ([]pod, error) {
	return listPods(namespace, selector, func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// podTerminating reports whether p has a deletion timestamp.
func podTerminating(p pod) bool {
	cs, err := kubeClient()
	if err != nil {
		return false
	}
	got, err := cs.CoreV1().Pods(p.namespace).Get(context.Background(), p.name, metav1.GetOptions{})
	return err == nil && got.DeletionTimestamp != nil
}

// podEnd is when a pod was first seen terminating (with a deletion timestamp) and when it was
// first found gone; zero when not seen.
type podEnd struct{ terminating, gone time.Time }

// watchPodEnd polls the API server for p every 100 ms until it is gone, and then delivers
// when it began terminating and when it went (the channel is closed without a value when p
// is still there after 5 minutes).
func watchPodEnd(t *testing.T, p pod) <-chan podEnd {
	t.Helper()
	pods := clientset(t).CoreV1().Pods(p.namespace)
	ch := make(chan podEnd, 1)
	go func() {
		defer close(ch)
		var end podEnd
		deadline := time.Now().Add(5 * time.Minute)
		for time.Now().Before(deadline) {
			got, err := pods.Get(context.Background(), p.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				end.gone = time.Now()
				if end.terminating.IsZero() {
					end.terminating = end.gone
				}
				ch <- end
				return
			case err == nil && got.DeletionTimestamp != nil && end.terminating.IsZero():
				end.terminating = time.Now()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return ch
}

// readyEndpoint reports whether an EndpointSlice of service in namespace lists ip as ready.
func readyEndpoint(namespace, service, ip string) bool {
	cs, err := kubeClient()
	if err != nil {
		return false
	}
	list, err := cs.DiscoveryV1().EndpointSlices(namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
	if err != nil {
		return false
	}
	for _, sl := range list.Items {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				for _, a := range ep.Addresses {
					if a == ip {
						return true
					}
				}
			}
		}
	}
	return false
}
