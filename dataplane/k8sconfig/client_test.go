package k8sconfig

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// TestConfigMapClient checks the requests of the core/v1-only client against what
// client-go's typed ConfigMaps client sends (path, query, Accept), and that it decodes
// protobuf lists and JSON watch events, without an API server.
func TestConfigMapClient(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pb := protobuf.NewSerializer(scheme, scheme)
	list := &corev1.ConfigMapList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "7"},
		Items: []corev1.ConfigMap{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tern", ResourceVersion: "7"},
			Data:       map[string]string{"tern.yaml": "version: v1\n"},
		}},
	}
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" accept="+r.Header.Get("Accept")+" ua="+r.Header.Get("User-Agent"))
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"ns","name":"tern","resourceVersion":"8"},"data":{"tern.yaml":"version: v1\n# 8\n"}}}`+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		if err := pb.Encode(list, w); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()

	c, err := newConfigMapClient(&rest.Config{Host: srv.URL, UserAgent: "ternd"}, "ns")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := c.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=tern", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 1 || got.Items[0].Name != "tern" || got.Items[0].Data["tern.yaml"] != "version: v1\n" || got.ResourceVersion != "7" {
		t.Fatalf("List = %+v", got)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=tern", ResourceVersion: "7"})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	w.Stop()
	cm, ok := ev.Object.(*corev1.ConfigMap)
	if ev.Type != watch.Modified || !ok || cm.ResourceVersion != "8" || !strings.Contains(cm.Data["tern.yaml"], "# 8") {
		t.Fatalf("Watch event = %s %#v", ev.Type, ev.Object)
	}

	want := []string{
		"GET /api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dtern&resourceVersion=0 accept=application/vnd.kubernetes.protobuf,application/json ua=ternd",
		"GET /api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dtern&resourceVersion=7&watch=true accept=application/vnd.kubernetes.protobuf,application/json ua=ternd",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
