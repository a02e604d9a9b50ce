package main

import (
	"net"
	"os"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// deploy/operator/deployment.yaml probes the endpoints the operator serves
// by default, names the auth service's port, and runs it with no privilege.
func TestDeployOperatorDeployment(t *testing.T) {
	b, err := os.ReadFile("../../deploy/operator/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The probe port is the default of --health-probe-bind-address.
	_, port, err := net.SplitHostPort(defaultHealthAddr)
	if err != nil {
		t.Fatal(err)
	}
	health := int32(0)
	for _, p := range c.Ports {
		if p.Name == "health" {
			health = p.ContainerPort
		}
	}
	if strconv.Itoa(int(health)) != port {
		t.Errorf("health port %d, want %s", health, port)
	}
	// The auth service's port is the default of --auth-addr, STUNner's 8088.
	_, authPort, err := net.SplitHostPort(defaultAuthAddr)
	if err != nil {
		t.Fatal(err)
	}
	auth := int32(0)
	for _, p := range c.Ports {
		if p.Name == "auth" {
			auth = p.ContainerPort
		}
	}
	if strconv.Itoa(int(auth)) != authPort {
		t.Errorf("auth port %d, want %s", auth, authPort)
	}
	for probe, path := range map[string]string{"liveness": "/healthz", "readiness": "/readyz"} {
		p := c.LivenessProbe
		if probe == "readiness" {
			p = c.ReadinessProbe
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "health" {
			t.Errorf("%s probe %+v, want GET %s on port health", probe, p, path)
		}
	}

	ps, cs := pod.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 ||
		ps.RunAsGroup == nil || *ps.RunAsGroup != 65532 || ps.SeccompProfile == nil || ps.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod securityContext %+v", ps)
	}
	if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.ReadOnlyRootFilesystem == nil ||
		!*cs.ReadOnlyRootFilesystem || cs.Capabilities == nil || len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container securityContext %+v", cs)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests", c.Resources)
	}
}
