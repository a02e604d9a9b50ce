//go:build cluster

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/test/docs"
)

// TestDocBlocksOnCluster runs the command blocks of README.md and docs/*.md whose doctest
// marker says `cluster` (docs/README.md, "Tested command blocks"): against the Helm chart's
// install with STUNner's reference UDP Gateway (deploy/examples/stunner-reference-udp-gateway.yaml)
// running, each block as written with bash in the repository root, in the cluster's network
// namespace with its kubectl; its exit status must be 0 and its output must hold what its
// marker expects. Whatever a block leaves running is killed by its process group. The Gateway
// is deleted at the end, and its pods awaited, so that TestTURNRelay creates it anew.
func TestDocBlocksOnCluster(t *testing.T) {
	cluster(t)
	installOperator(t)
	root := repoRoot(t)
	bash, err := exec.LookPath("bash")
	testenv.Require(t, "bash", err)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docs.Block
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		bs, err := docs.Blocks(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Cluster && b.Skip == "" {
				blocks = append(blocks, b)
			}
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no doc block is marked cluster")
	}

	gateway := filepath.Join(root, "deploy", "examples", "stunner-reference-udp-gateway.yaml")
	kubectl(t, "apply", "-f", filepath.Join(root, "test", "cluster", "testdata", "gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", gateway)
	t.Cleanup(func() {
		pods, _ := listPods(gatewayNamespace, gatewaySelector, func(*corev1.Pod) bool { return true })
		_, _ = tryRun(nil, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", gateway)
		for _, p := range pods {
			select {
			case <-watchPodEnd(t, p):
			case <-time.After(dataplaneGrace + 60*time.Second):
				t.Errorf("ternd pod %s still there after the Gateway's deletion", p.name)
			}
		}
	})
	testenv.Eventually(t, 120*time.Second, func() error {
		pods, err := readyPods(gatewayNamespace, gatewaySelector)
		if err != nil || len(pods) == 0 {
			return fmt.Errorf("no Ready ternd pod for the reference Gateway (%v)", err)
		}
		return nil
	})

	for _, b := range blocks {
		rel, _ := filepath.Rel(root, b.File)
		t.Run(fmt.Sprintf("%s:%d", rel, b.Line), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, "-c", b.Script+`
__rc=$?
for __pid in $(jobs -p); do kill "$__pid" 2>/dev/null; done
wait 2>/dev/null
exit "$__rc"
`)
			cmd.Dir = root
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if cmd.Process != nil {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			if err != nil {
				t.Fatalf("bash exited with %v; output:\n%s", err, out.String())
			}
			for _, want := range b.Expect {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the output lacks %q, which the doc's marker promises; output:\n%s", want, out.String())
				}
			}
			t.Logf("output:\n%s", out.String())
		})
	}
}
