package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/operator/render"
)

// The Gateway's OffloadActive condition comes from its pods: each ternd
// decides at start whether the kernel lets it attach and serves the
// outcome at its health port (offloadmode.ReportPath). The operator reads
// it there, so the pods need no API credentials to report it, when a pod
// becomes ready (a Pod event) and again every offloadPoll while a Gateway
// asks for offload, since a reconfiguration may reopen the programs.

// offloadPoll is how often the reports of Gateways asking for offload are
// read again; a report read less than offloadPoll ago is reused.
const offloadPoll = time.Minute

// offloadTimeout bounds one pod's report read.
const offloadTimeout = 3 * time.Second

// offloadReader reads and caches the pods' offload reports.
type offloadReader struct {
	port   int
	client *http.Client
	mu     sync.Mutex
	cache  map[types.UID]cachedOffload
}

type cachedOffload struct {
	ip  string
	at  time.Time
	rep offloadmode.Report
	err error
}

func newOffloadReader(port int) *offloadReader {
	if port == 0 {
		port = render.HealthPort
	}
	return &offloadReader{port: port, client: &http.Client{Timeout: offloadTimeout}, cache: map[types.UID]cachedOffload{}}
}

// withOffloadActive returns want with the Gateway's OffloadActive
// condition added, and whether the condition asks to be read again later
// (the Gateway asks for offload). A Gateway whose OffloadRequested
// condition is absent gets OffloadActive False, NotRequested.
func (r *Reconciler) withOffloadActive(ctx context.Context, gw *gwapiv1.Gateway, want *gwapiv1.GatewayStatus) (*gwapiv1.GatewayStatus, bool) {
	requested := meta.IsStatusConditionTrue(want.Conditions, render.ConditionOffloadRequested)
	var pods []render.PodOffload
	if requested {
		var err error
		pods, err = r.podOffloads(ctx, gw)
		if err != nil {
			r.log.Error(err, "list dataplane pods", "gateway", gw.Namespace+"/"+gw.Name)
		}
	}
	out := *want
	out.Conditions = append(slices.Clone(want.Conditions), render.OffloadActiveCondition(requested, pods, gw.Generation))
	return &out, requested
}

// podOffloads reads the report of each ready pod of gw, sorted by pod
// name; reads run in parallel, each within offloadTimeout.
func (r *Reconciler) podOffloads(ctx context.Context, gw *gwapiv1.Gateway) ([]render.PodOffload, error) {
	var list corev1.PodList
	sel := client.MatchingLabels{render.LabelApp: render.LabelAppValue, render.LabelGatewayName: gw.Name,
		render.LabelGatewayNamespace: gw.Namespace, render.LabelManagedBy: render.LabelManagedByValue}
	if err := r.client.List(ctx, &list, client.InNamespace(gw.Namespace), sel); err != nil {
		return nil, err
	}
	var ready []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p) {
			ready = append(ready, p)
		}
	}
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	out := make([]render.PodOffload, len(ready))
	var wg sync.WaitGroup
	for i, p := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := r.offload.read(ctx, p.UID, p.Status.PodIP)
			out[i] = render.PodOffload{Pod: p.Name, Report: rep, Err: err}
		}()
	}
	wg.Wait()
	r.offload.prune()
	return out, nil
}

// read returns the report of the pod uid at ip, from the cache when it was
// read less than offloadPoll ago from the same address.
func (o *offloadReader) read(ctx context.Context, uid types.UID, ip string) (offloadmode.Report, error) {
	o.mu.Lock()
	c, ok := o.cache[uid]
	o.mu.Unlock()
	if ok && c.ip == ip && time.Since(c.at) < offloadPoll {
		return c.rep, c.err
	}
	rep, err := o.fetch(ctx, ip)
	o.mu.Lock()
	o.cache[uid] = cachedOffload{ip: ip, at: time.Now(), rep: rep, err: err}
	o.mu.Unlock()
	return rep, err
}

func (o *offloadReader) fetch(ctx context.Context, ip string) (offloadmode.Report, error) {
	var rep offloadmode.Report
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(o.port)) + offloadmode.ReportPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return rep, err
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<10)).Decode(&rep); err != nil {
		return rep, fmt.Errorf("GET %s: %w", url, err)
	}
	return rep, nil
}

// prune drops the reports read more than two polls ago: those of pods
// that are gone or no longer ready, since every other is read each poll.
func (o *offloadReader) prune() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for uid, c := range o.cache {
		if time.Since(c.at) > 2*offloadPoll {
			delete(o.cache, uid)
		}
	}
}

// podReady reports whether p's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podReadinessChanged passes a dataplane pod's creation and deletion and
// the updates that change its readiness or address: the moments its
// offload report appears or goes.
func podReadinessChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			return !ok1 || !ok2 || podReady(o) != podReady(n) || o.Status.PodIP != n.Status.PodIP
		},
	}
}
