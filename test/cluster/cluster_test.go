//go:build cluster

package cluster

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// cluster returns the work dir of the running cluster, or skips (fails under CI) when the test
// does not run where `hack/cluster.sh exec` puts it.
func cluster(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TERN_CLUSTER_DIR")
	if dir == "" || os.Getenv("KUBECONFIG") == "" {
		testenv.SkipOrFail(t, "no cluster: run through `hack/cluster.sh exec` (or make cluster-e2e)")
	}
	_, err := exec.LookPath("kubectl")
	testenv.Require(t, "kubectl (hack/cluster.sh exec puts the cluster's binaries on PATH)", err)
	return dir
}

// run runs a command and returns its stdout; it fails t with the command's output on error.
func run(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func tryRun(stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, nil, "kubectl", args...)
}

// ctr runs containerd's client against the containerd listening on sock (a node's), in its
// k8s.io namespace.
func ctr(t *testing.T, sock string, args ...string) string {
	t.Helper()
	return run(t, nil, "ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestNodeReady wants every node Ready, each with an InternalIP of its own on the nodes'
// bridge (its network namespace's address).
func TestNodeReady(t *testing.T) {
	cluster(t)
	nodes := clusterNodes(t)
	if len(nodes) == 0 {
		t.Fatal("the cluster has no nodes")
	}
	subnet := netip.MustParsePrefix(nodeNetwork)
	seen := map[string]string{}
	for _, n := range nodes {
		ready := kubectl(t, "get", "node", n.name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if ready != "True" {
			t.Errorf("node %s Ready=%q\n%s", n.name, ready, kubectl(t, "describe", "node", n.name))
		}
		ip, err := netip.ParseAddr(n.ip)
		if err != nil || !subnet.Contains(ip) || seen[n.ip] != "" {
			t.Errorf("node %s InternalIP %q: want an address of its own in %s (taken by: %q)", n.name, n.ip, nodeNetwork, seen[n.ip])
		}
		seen[n.ip] = n.name
	}
	t.Logf("%d node(s) Ready: %v", len(nodes), nodes)
}

// TestPauseDeployments rolls out the pause image on the pod network and on the node's
// network, and checks that a pod reaches the API server through the kubernetes Service (what
// the operator's in-cluster config uses), that is through kube-proxy's rules.
func TestPauseDeployments(t *testing.T) {
	dir := cluster(t)
	manifest := filepath.Join(repoRoot(t), "test", "cluster", "testdata", "pause.yaml")
	start := time.Now()
	kubectl(t, "apply", "-f", manifest)
	t.Cleanup(func() { _, _ = tryRun(nil, "kubectl", "delete", "--wait=false", "-f", manifest) })
	kubectl(t, "rollout", "status", "deployment/pause-bridge", "deployment/pause-host", "--timeout=120s")
	t.Logf("pause Deployments (bridge and hostNetwork) rolled out %.1fs after kubectl apply", time.Since(start).Seconds())

	cidr := netip.MustParsePrefix(podCIDR)
	bridgeIP := podIP(t, "app=pause-bridge")
	if ip, err := netip.ParseAddr(bridgeIP); err != nil || !cidr.Contains(ip) {
		t.Errorf("pause-bridge pod IP %q is not in the pod network %s", bridgeIP, podCIDR)
	}
	host := runningPods(t, "default", "app=pause-host")[0]
	if host.ip != host.hostIP || host.hostIP == "" {
		t.Errorf("hostNetwork pod %v: want its node's address %q", host, host.hostIP)
	}

	// From inside the bridge pod's network namespace (entered through its sandbox's PID):
	// https://10.96.0.1/readyz, the kubernetes Service, answered by the API server.
	pod := strings.TrimSpace(kubectl(t, "get", "pod", "-l", "app=pause-bridge", "-o", "jsonpath={.items[0].metadata.name}"))
	pid := sandboxPID(t, dir, pod)
	out := run(t, nil, "nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "--",
		"curl", "-sk", "--max-time", "5", "https://10.96.0.1/readyz")
	if out != "ok" {
		t.Errorf("the API server through the kubernetes Service from pod %s: %q, want ok", pod, out)
	}
}

func podIP(t *testing.T, selector string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "get", "pod", "-l", selector, "-o", "jsonpath={.items[0].status.podIP}"))
}

// sandboxPID finds the PID of a pod's sandbox (pause) process through the containerd of the
// node that runs it: the container labelled as the pod's sandbox, and its task.
func sandboxPID(t *testing.T, dir, pod string) int {
	t.Helper()
	var found []string
	for _, sock := range containerdSockets(t, dir) {
		ids := ctr(t, sock, "containers", "ls", "-q",
			"labels.\"io.kubernetes.pod.name\"=="+pod+",labels.\"io.cri-containerd.kind\"==sandbox")
		for _, id := range strings.Fields(ids) {
			found = append(found, id)
			for _, line := range strings.Split(ctr(t, sock, "tasks", "ls"), "\n") {
				f := strings.Fields(line)
				if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
					pid, err := strconv.Atoi(f[1])
					if err != nil {
						t.Fatal(err)
					}
					return pid
				}
			}
		}
	}
	t.Fatalf("no running task for the sandbox of pod %s (sandboxes %v)", pod, found)
	return 0
}

// importedImage returns the reference of the image containerd holds whose repository ends in
// /name (imported by hack/cluster.sh from bin/images/name-*.tar), or "" when there is none.
func importedImage(t *testing.T, dir, name string) string {
	t.Helper()
	for _, ref := range strings.Fields(ctr(t, containerdSockets(t, dir)[0], "images", "ls", "-q")) {
		repo := ref
		if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
			repo = ref[:i]
		}
		if strings.HasSuffix(repo, "/"+name) && !strings.Contains(ref, "@") {
			return ref
		}
	}
	return ""
}

// TestOperatorInstall installs the Helm chart deploy/helm/tern with Helm's library
// (action.Install against the cluster's kubeconfig, like `helm install --wait`), the images
// being the ones `make images` built (bin/images/ternd-*.tar, tern-operator-*.tar, imported by
// hack/cluster.sh up) by their version tag, and waits for the operator to be Ready and elected
// leader. The release stays for the tests after it; hack/cluster.sh down removes everything.
// (`kubectl apply -k deploy/` installs the same objects as the chart's defaults: deploy/helm's
// tests compare the two renders.)
func TestOperatorInstall(t *testing.T) {
	installOperator(t)
}

var install struct {
	sync.Mutex
	done bool
	skip string
	tag  string // the images' version tag
}

// installOperator installs the chart once per test binary and returns the images' tag; it
// skips when bin/images has no images.
func installOperator(t *testing.T) string {
	t.Helper()
	dir := cluster(t)
	install.Lock()
	defer install.Unlock()
	if install.skip != "" {
		testenv.SkipOrFail(t, "%s", install.skip)
	}
	if install.done {
		return install.tag
	}
	root := repoRoot(t)
	for _, pattern := range []string{"ternd-*.tar", "tern-operator-*.tar"} {
		if m, _ := filepath.Glob(filepath.Join(root, "bin", "images", pattern)); len(m) == 0 {
			install.skip = fmt.Sprintf("no bin/images/%s: run make images (then hack/cluster.sh up imports it)", pattern)
			testenv.SkipOrFail(t, "%s", install.skip)
		}
	}
	operatorRef, terndRef := importedImage(t, dir, "tern-operator"), importedImage(t, dir, "ternd")
	if operatorRef == "" || terndRef == "" {
		t.Fatalf("bin/images has the archives but containerd holds no tern-operator/ternd image (operator %q, ternd %q): did hack/cluster.sh up run after make images?\n%s",
			operatorRef, terndRef, ctr(t, containerdSockets(t, dir)[0], "images", "ls", "-q"))
	}
	operatorRepo, tag := splitRef(operatorRef)
	terndRepo, terndTag := splitRef(terndRef)
	if operatorRepo != "ghcr.io/tern-gw/tern-operator" || terndRepo != "ghcr.io/tern-gw/ternd" || terndTag != tag {
		t.Fatalf("imported images %s and %s: want ghcr.io/tern-gw/{tern-operator,ternd} at one tag, the chart's repositories", operatorRef, terndRef)
	}
	t.Logf("images: %s, %s", operatorRef, terndRef)

	start := time.Now()
	rel := helmInstall(t, chartValues(tag, false))
	t.Logf("helm install %s (chart %s %s, release namespace %s): deployed, operator Ready %.1fs after the install began",
		rel.Name, rel.Chart.Metadata.Name, rel.Chart.Metadata.Version, rel.Namespace, time.Since(start).Seconds())
	if _, err := tryRun(nil, "kubectl", "-n", releaseNamespace, "rollout", "status", "deployment/tern-operator", "--timeout=60s"); err != nil {
		desc, _ := tryRun(nil, "kubectl", "-n", releaseNamespace, "describe", "pods")
		logs, _ := tryRun(nil, "kubectl", "-n", releaseNamespace, "logs", "deployment/tern-operator", "--tail=50")
		t.Fatalf("operator not Ready: %v\n%s\nlogs:\n%s", err, desc, logs)
	}
	// The operator's leader-election Lease has a holder: it reaches the API server from its pod
	// (through the kubernetes Service, that is kube-proxy).
	testenv.Eventually(t, 60*time.Second, func() error {
		holder, err := tryRun(nil, "kubectl", "-n", releaseNamespace, "get", "lease", "tern-operator.stunner.l7mp.io",
			"-o", "jsonpath={.spec.holderIdentity}")
		if err != nil || holder == "" {
			return fmt.Errorf("no leader in Lease %s/tern-operator.stunner.l7mp.io (%q, %v)", releaseNamespace, holder, err)
		}
		return nil
	})
	t.Logf("operator elected leader %.1fs after the install began", time.Since(start).Seconds())
	if image := kubectl(t, "get", "dataplane", "default", "-o", "jsonpath={.spec.image}"); image != terndRef {
		t.Fatalf("Dataplane default image %q, want %q", image, terndRef)
	}
	install.done, install.tag = true, tag
	return tag
}

// splitRef splits "registry/repo:tag" into "registry/repo" and "tag".
func splitRef(ref string) (string, string) {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}
