package dataplane

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/config"
)

// TestStatusFollowsReconfigure: /status reports the config in force and
// may be read while a reconfiguration adds a listener and a cluster (the
// race detector watches the reads); draining turns it TERMINATING.
func TestStatusFollowsReconfigure(t *testing.T) {
	srv, cfg := startServer(t, 29960, 29969)
	next := *cfg
	next.Listeners = append([]config.Listener{}, cfg.Listeners...)
	l := next.Listeners[0]
	l.Name, l.Protocol, l.Port, l.Routes = "tcp", "TURN-TCP", freePort(t, "tcp"), []string{"more"}
	next.Listeners = append(next.Listeners, l)
	next.Clusters = append(append([]config.Cluster{}, cfg.Clusters...), config.Cluster{Name: "more", Endpoints: []string{"127.0.0.2/32"}})

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = srv.status()
			}
		}
	}()
	err := srv.Reconfigure(&next)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	get := func() admin.Status {
		t.Helper()
		resp, err := http.Get("http://" + cfg.Admin.HealthAddress + admin.StatusPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st admin.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := get()
	if len(st.Listeners) != 2 || st.Listeners[1].Name != "tcp" || len(st.Clusters) != 2 || st.Clusters[1].Name != "more" {
		t.Errorf("after reconfiguration: listeners %+v, clusters %+v", st.Listeners, st.Clusters)
	}
	if st.Status != admin.StatusReady || st.AllocationCount != 0 {
		t.Errorf("status %q, allocationCount %d; want READY, 0", st.Status, st.AllocationCount)
	}
	srv.Drain()
	if st := get(); st.Status != admin.StatusTerminating {
		t.Errorf("status %q while draining, want TERMINATING", st.Status)
	}
}
