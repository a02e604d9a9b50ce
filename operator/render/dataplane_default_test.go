package render

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// The Dataplane deploy/ installs and the one the cluster-less tools assume
// must not drift apart. The image tag differs by design: DefaultImage is
// the binary's version, deploy/ the version `make deploy-version` set.
func TestDefaultDataplaneMatchesDeploy(t *testing.T) {
	f, err := os.Open("../../deploy/dataplane/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, _, err := Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Dataplanes) != 1 {
		t.Fatalf("want one Dataplane, got %d", len(in.Dataplanes))
	}
	got, want := in.Dataplanes[0].Spec, DefaultDataplane().Spec
	repo, tag, _ := strings.Cut(got.Image, ":")
	if repo != DefaultImageRepository {
		t.Errorf("deploy/dataplane/default.yaml: image %s, want %s:<tag>", got.Image, DefaultImageRepository)
	}
	if dtag := deployTag(t); tag != dtag {
		t.Errorf("deploy/dataplane/default.yaml: image tag %q, deploy/kustomization.yaml newTag %q", tag, dtag)
	}
	got.Image = want.Image
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("deploy/dataplane/default.yaml:\n%+v\nDefaultDataplane():\n%+v", got, want)
	}

	in.WithDefaultDataplane()
	if len(in.Dataplanes) != 1 {
		t.Fatal("WithDefaultDataplane added a second default")
	}
}

// deployTag returns the one newTag of deploy/kustomization.yaml's images
// block, and checks the operator's Deployment uses it too.
func deployTag(t *testing.T) string {
	t.Helper()
	k, err := os.ReadFile("../../deploy/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*- name: (\S+)\n\s*newTag: (\S+)$`).FindAllStringSubmatch(string(k), -1)
	tags := map[string]string{}
	for _, x := range m {
		tags[x[1]] = x[2]
	}
	tag := tags[DefaultImageRepository]
	if tag == "" || tags["ghcr.io/tern-gw/tern-operator"] != tag || len(tags) != 2 {
		t.Fatalf("deploy/kustomization.yaml images: %v; want ternd and tern-operator at one tag", tags)
	}
	op, err := os.ReadFile("../../deploy/operator/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(op), "image: ghcr.io/tern-gw/tern-operator:"+tag+"\n") {
		t.Errorf("deploy/operator/deployment.yaml does not use tern-operator:%s", tag)
	}
	return tag
}

func TestDefaultImage(t *testing.T) {
	if got, want := DefaultImage(), "ghcr.io/tern-gw/ternd:dev"; got != want {
		t.Errorf("DefaultImage() = %q in an unstamped test binary, want %q", got, want)
	}
}
