package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	for _, same := range []bool{false, true} {
		t.Run(fmt.Sprintf("one address %v", same), func(t *testing.T) {
			health, metricsAt := freeAddr(t), freeAddr(t)
			if same {
				metricsAt = health
			}
			var ready atomic.Bool
			e, err := Start(config.Admin{HealthAddress: health, MetricsAddress: metricsAt}, Handlers{
				Ready:   ready.Load,
				Metrics: func(w io.Writer) { fmt.Fprintln(w, "tern_test_metric 1") },
			}, slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if code, _ := get(t, "http://"+health+"/live"); code != 200 {
				t.Errorf("/live: %d", code)
			}
			if code, _ := get(t, "http://"+health+"/ready"); code != 503 {
				t.Errorf("/ready before ready: %d, want 503", code)
			}
			ready.Store(true)
			if code, _ := get(t, "http://"+health+"/ready"); code != 200 {
				t.Errorf("/ready: %d", code)
			}
			code, body := get(t, "http://"+metricsAt+"/metrics")
			if code != 200 || !strings.Contains(body, "tern_test_metric 1") || !strings.Contains(body, "process_resident_memory_bytes") {
				t.Errorf("/metrics: %d\n%s", code, body)
			}
		})
	}
}

// TestAddressInUse: an address that cannot be listened on is an error
// naming it, and nothing keeps serving.
func TestAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free := freeAddr(t)
	_, err = Start(config.Admin{HealthAddress: free, MetricsAddress: ln.Addr().String()}, Handlers{Ready: func() bool { return true }, Metrics: func(io.Writer) {}}, slog.Default())
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("err = %v, want one naming %s", err, ln.Addr())
	}
	if c, err := net.Dial("tcp", free); err == nil {
		c.Close()
		t.Errorf("%s still served after Start failed", free)
	}
}

func TestPprof(t *testing.T) {
	addr := freeAddr(t)
	e, err := StartPprof(addr, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if code, body := get(t, "http://"+addr+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof index: %d", code)
	}
}

// TestOffloadReport: the health address serves the offload report as
// JSON at offloadmode.ReportPath, which tern-operator decodes; the metrics
// address does not, and nothing is served without a handler.
func TestOffloadReport(t *testing.T) {
	health, metricsAt := freeAddr(t), freeAddr(t)
	want := offloadmode.Report{Requested: offloadmode.Auto, Attached: offloadmode.TC, Active: true, Reason: offloadmode.ReasonAttached,
		Interfaces: map[string]offloadmode.ReportInterface{"eth0": {Hook: "TC", Attach: "tcx", Egress: "same_interface", Why: "single_interface"}}}
	e, err := Start(config.Admin{HealthAddress: health, MetricsAddress: metricsAt}, Handlers{
		Ready:   func() bool { return true },
		Metrics: func(io.Writer) {},
		Offload: func() offloadmode.Report { return want },
	}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	code, body := get(t, "http://"+health+offloadmode.ReportPath)
	var got offloadmode.Report
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %d %q (%v), want %+v", offloadmode.ReportPath, code, body, err, want)
	}
	if code, _ := get(t, "http://"+metricsAt+offloadmode.ReportPath); code != 404 {
		t.Errorf("%s on the metrics address: %d, want 404", offloadmode.ReportPath, code)
	}

	health2 := freeAddr(t)
	e2, err := Start(config.Admin{HealthAddress: health2}, Handlers{Ready: func() bool { return true }}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if code, _ := get(t, "http://"+health2+offloadmode.ReportPath); code != 404 {
		t.Errorf("%s without a handler: %d, want 404", offloadmode.ReportPath, code)
	}
}
