package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// stunnerStatus mirrors STUNner's v1 StunnerStatus (pkg/apis/v1 in
// l7mp/stunner) as `stunnerctl status` decodes it: the same Go shape and
// JSON keys, written here from STUNner's published schema (its modules are
// not on the Go module proxy). The listener and cluster statuses embed a
// pointer to their config, as STUNner's do, so the config's keys sit next
// to "stats" (exported, as encoding/json sets only exported embedded
// pointers).
type stunnerStatus struct {
	ApiVersion      string                 `json:"version"`
	Admin           *stunnerAdminStatus    `json:"admin"`
	Auth            *stunnerAuthConfig     `json:"auth"`
	Listeners       []*stunnerListenerStat `json:"listeners"`
	Clusters        []*stunnerClusterStat  `json:"clusters"`
	AllocationCount int                    `json:"allocationCount"`
	Status          string                 `json:"status"`
}

type stunnerAdminStatus struct {
	Name                string `json:"name,omitempty"`
	LogLevel            string `json:"loglevel,omitempty"`
	MetricsEndpoint     string `json:"metrics_endpoint,omitempty"`
	HealthCheckEndpoint string `json:"healthcheck_endpoint,omitempty"`
	UserQuota           string `json:"quota,omitempty"`
	OffloadStatus       string `json:"offload,omitempty"`
	LicensingInfo       string `json:"licensing_info,omitempty"`
}

type stunnerAuthConfig struct {
	Type        string            `json:"type,omitempty"`
	Realm       string            `json:"realm,omitempty"`
	Credentials map[string]string `json:"credentials"`
}

type StunnerListenerConfig struct {
	Name       string   `json:"name,omitempty"`
	Protocol   string   `json:"protocol,omitempty"`
	PublicAddr string   `json:"public_address,omitempty"`
	PublicPort int      `json:"public_port,omitempty"`
	Addr       string   `json:"address,omitempty"`
	Port       int      `json:"port,omitempty"`
	Cert       string   `json:"cert,omitempty"`
	Key        string   `json:"key,omitempty"`
	Routes     []string `json:"routes,omitempty"`
}

type StunnerClusterConfig struct {
	Name      string   `json:"name"`
	Type      string   `json:"type,omitempty"`
	Protocol  string   `json:"protocol,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
}

type stunnerStatInfo struct {
	Pkts          uint64 `json:"pkts"`
	Bytes         uint64 `json:"bytes"`
	TimestampLast uint64 `json:"timestamp"`
}

type stunnerDirStat struct {
	Rx stunnerStatInfo `json:"rx"`
	Tx stunnerStatInfo `json:"tx"`
}

type stunnerListenerStat struct {
	*StunnerListenerConfig
	Stats stunnerDirStat `json:"stats"`
}

type stunnerClusterStat struct {
	*StunnerClusterConfig
	Stats stunnerDirStat `json:"stats"`
}

// getStatus GETs /status as stunnerctl does (after its port-forward):
// a 200 whose body json.Decoder decodes into stunnerStatus, unknown
// fields allowed. It returns the body too.
func getStatus(s *server) (stunnerStatus, string, error) {
	var st stunnerStatus
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(s.healthURL + "/status")
	if err != nil {
		return st, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return st, "", err
	}
	if res.StatusCode != http.StatusOK {
		return st, string(b), fmt.Errorf("/status: %s", res.Status)
	}
	err = json.NewDecoder(strings.NewReader(string(b))).Decode(&st)
	return st, string(b), err
}

// TestStunnerctlStatus: ternd's /status is what `stunnerctl status` reads
// from stunnerd: with two listeners, a cluster and one allocation it
// decodes into STUNner's StunnerStatus with allocationCount 1, the
// listeners and the cluster by name, status READY and no credential; once
// SIGTERM starts the drain, it says TERMINATING, as stunnerd's does.
func TestStunnerctlStatus(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn has no /status")
	}
	const user, password = "status-user", "Status-Pw-7f3a9"
	tcpPort, release := freePort(t, "tcp4")
	release()
	s := startTernd(t, func(c *config) {
		c.Auth.Username, c.Auth.Password = user, password
		c.Listeners = append(c.Listeners, listener{Name: "tcp", Protocol: "TURN-TCP", Address: "127.0.0.1", Port: tcpPort, Routes: []string{"local"}})
	})
	echo := startEchoPeer(t, "127.0.0.1:0")
	relayConn := newPionClient(t, s, user, password).allocate(t)
	roundTrips(t, relayConn, echo.addr, 3)

	var st stunnerStatus
	var body string
	testenv.Eventually(t, readyTimeout, func() error {
		var err error
		st, body, err = getStatus(s)
		if err != nil {
			return err
		}
		// The per-worker counters are folded at each request.
		if len(st.Clusters) == 0 || st.Clusters[0].Stats.Tx.Pkts < 3 {
			return fmt.Errorf("cluster counters not there yet: %s", body)
		}
		return nil
	})
	t.Logf("/status: %s", body)
	for _, secret := range []string{password, user} {
		if strings.Contains(body, secret) {
			t.Errorf("/status holds the credential %q: %s", secret, body)
		}
	}
	if st.ApiVersion != "v1" || st.AllocationCount != 1 || st.Status != "READY" {
		t.Errorf("version %q, allocationCount %d, status %q; want v1, 1, READY", st.ApiVersion, st.AllocationCount, st.Status)
	}
	if st.Admin == nil || st.Admin.Name != "e2e" || st.Admin.HealthCheckEndpoint != s.healthURL || st.Admin.OffloadStatus != "None[all]" {
		t.Errorf("admin %+v", st.Admin)
	}
	if st.Auth == nil || st.Auth.Type != "static" || st.Auth.Realm != testRealm ||
		st.Auth.Credentials["password"] != "<SECRET>" || st.Auth.Credentials["username"] != "<SECRET>" {
		t.Errorf("auth %+v", st.Auth)
	}
	var names []string
	for _, l := range st.Listeners {
		if l.StunnerListenerConfig == nil {
			t.Fatalf("a listener without its config: %s", body)
		}
		names = append(names, l.Name+"/"+l.Protocol)
		if l.Addr != "127.0.0.1" || !slices.Equal(l.Routes, []string{"local"}) {
			t.Errorf("listener %+v", *l.StunnerListenerConfig)
		}
		if l.Name == "udp" && (l.Port != s.addr.Port || l.Stats.Rx.Pkts == 0 || l.Stats.Tx.Pkts == 0) {
			t.Errorf("listener udp: port %d (want %d), stats %+v (want packets both ways)", l.Port, s.addr.Port, l.Stats)
		}
	}
	if !slices.Equal(names, []string{"udp/TURN-UDP", "tcp/TURN-TCP"}) {
		t.Errorf("listeners %v, want udp/TURN-UDP, tcp/TURN-TCP", names)
	}
	if len(st.Clusters) != 1 || st.Clusters[0].Name != "local" || st.Clusters[0].Type != "STATIC" || st.Clusters[0].Protocol != "UDP" ||
		!slices.Equal(st.Clusters[0].Endpoints, []string{"127.0.0.1/32"}) || st.Clusters[0].Stats.Rx.Pkts < 3 {
		t.Errorf("clusters: %s", body)
	}

	s.signal(t, syscall.SIGTERM)
	testenv.Eventually(t, readyTimeout, func() error {
		st, body, err := getStatus(s)
		if err != nil {
			return err
		}
		if st.Status != "TERMINATING" || st.AllocationCount != 1 {
			return fmt.Errorf("after SIGTERM: %s", body)
		}
		return nil
	})
	if err := relayConn.Close(); err != nil {
		t.Fatal(err)
	}
	if exited, err := s.waitExit(stopTimeout); !exited || err != nil {
		t.Errorf("ternd after draining: exited %v, %v", exited, errors.Join(err))
	}
}
