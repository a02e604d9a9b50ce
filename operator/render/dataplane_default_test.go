package render

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// The Dataplane deploy/ installs and the one the cluster-less tools assume
// must not drift apart.
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
	if got, want := in.Dataplanes[0].Spec, DefaultDataplane().Spec; !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("deploy/dataplane/default.yaml:\n%+v\nDefaultDataplane():\n%+v", got, want)
	}

	in.WithDefaultDataplane()
	if len(in.Dataplanes) != 1 {
		t.Fatal("WithDefaultDataplane added a second default")
	}
}
