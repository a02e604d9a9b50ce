//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/internal/testenv"
)

// The addresses hack/cluster.sh gives: tern-node-i has 10.244.0.(10+i) (and fd00:244::(10+i))
// on the bridge tern0, whose 10.244.0.1 (and fd00:244::1) is the control plane's; its pods get
// an address in 10.88.i.0/24 and one in fd00:88:0:i::/64 (the pod network is dual-stack).
const (
	nodeNetwork = "10.244.0.0/24"
	podCIDR     = "10.88.0.0/16"
	podCIDR6    = "fd00:88::/48"
)

// node is a cluster node: its name and its InternalIP (the address of its network namespace).
type node struct{ name, ip string }

// clusterNodes lists the cluster's nodes by name.
func clusterNodes(t *testing.T) []node {
	t.Helper()
	list, err := clientset(t).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []node
	for _, n := range list.Items {
		nd := node{name: n.Name}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				nd.ip = a.Address
			}
		}
		nodes = append(nodes, nd)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].name < nodes[j].name })
	return nodes
}

// requireNodes returns the cluster's nodes, or skips (fails under CI=true) when it has fewer
// than n: make cluster-e2e starts NODES=3, hack/cluster.sh's default is one.
func requireNodes(t *testing.T, n int) []node {
	t.Helper()
	nodes := clusterNodes(t)
	if len(nodes) < n {
		testenv.SkipOrFail(t, "needs a cluster of %d nodes, this one has %d: NODES=%d hack/cluster.sh up (make cluster-e2e does)", n, len(nodes), n)
	}
	return nodes
}

// firstNode returns the first node by name (tern-node-1).
func firstNode(t *testing.T) node {
	t.Helper()
	nodes := clusterNodes(t)
	if len(nodes) == 0 {
		t.Fatal("the cluster has no nodes")
	}
	return nodes[0]
}

// containerdSockets returns the containerd sockets of the cluster's nodes (hack/cluster.sh
// keeps node N's under <work dir>/nodes/N/containerd).
func containerdSockets(t *testing.T, dir string) []string {
	t.Helper()
	socks, err := filepath.Glob(filepath.Join(dir, "nodes", "*", "containerd", "containerd.sock"))
	if err != nil || len(socks) == 0 {
		t.Fatalf("no containerd socket under %s/nodes (%v): is this hack/cluster.sh's work dir?", dir, err)
	}
	sort.Strings(socks)
	return socks
}

// nodeNetns returns the file hack/cluster.sh binds a node's network namespace to.
func nodeNetns(dir, name string) string { return filepath.Join(dir, "ns", name+".net") }

// listenUDPIn opens a UDP socket (IPv4, any address, an ephemeral port) in the network
// namespace bound to nsPath (a node's, or /proc/PID/ns/net of a pod's sandbox). The socket
// stays in that namespace; the calling goroutine's thread is switched there for the call
// alone, and is thrown away (never unlocked) should switching back fail.
func listenUDPIn(nsPath string) (net.PacketConn, error) {
	return listenNetIn(nsPath, "udp4", "0.0.0.0:0")
}

// listenUDP6In is listenUDPIn for IPv6: a socket on [::] at an ephemeral port.
func listenUDP6In(nsPath string) (net.PacketConn, error) {
	return listenNetIn(nsPath, "udp6", "[::]:0")
}

// listenNetIn is listenUDPIn with the socket's network and address.
func listenNetIn(nsPath, network, addr string) (net.PacketConn, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns %s: %w", nsPath, err)
	}
	conn, lerr := net.ListenPacket(network, addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("setns back from %s: %w", nsPath, err) // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return conn, lerr
}
