package render

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// TestGatewayConfigAuth checks the exported resolution credential issuers use against the
// shapes adopters write: inline fields, an authRef Secret, a password Secret key, and the
// problems that leave no usable credentials.
func TestGatewayConfigAuth(t *testing.T) {
	secret := func(ns, name string, data map[string]string) corev1.Secret {
		s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	secrets := []corev1.Secret{
		secret("ns", "auth", map[string]string{"type": "ephemeral", "secret": "from-ref"}),
		secret("other", "creds", map[string]string{"password": "pw", "pass2": "pw2", "binary": "pa\xffss"}),
		secret("ns", "binauth", map[string]string{"type": "ephemeral", "secret": "s\xfe"}),
	}
	for _, tc := range []struct {
		name    string
		spec    stnrv1.GatewayConfigSpec
		want    config.Auth
		wantErr string // in the error; "" for none
		refs    []types.NamespacedName
	}{
		{name: "static inline", spec: stnrv1.GatewayConfigSpec{Username: ptr("u"), Password: stnrv1.InlinePassword("p")},
			want: config.Auth{Type: config.AuthStatic, Realm: config.DefaultRealm, Username: "u", Password: "p"}},
		{name: "ephemeral inline", spec: stnrv1.GatewayConfigSpec{AuthType: ptr("longterm"), SharedSecret: ptr("s"), Realm: ptr("r")},
			want: config.Auth{Type: config.AuthEphemeral, Realm: "r", SharedSecret: "s"}},
		{name: "authRef overrides", spec: stnrv1.GatewayConfigSpec{AuthType: ptr("static"), SharedSecret: ptr("inline"),
			AuthRef: &gwapiv1.SecretObjectReference{Name: "auth"}},
			want: config.Auth{Type: config.AuthEphemeral, Realm: config.DefaultRealm, SharedSecret: "from-ref"},
			refs: []types.NamespacedName{{Namespace: "ns", Name: "auth"}}},
		{name: "password Secret key", spec: stnrv1.GatewayConfigSpec{UserName: ptr("u"),
			Password: &stnrv1.Password{SecretRef: &stnrv1.SecretKeyReference{Name: "creds", Namespace: "other", Key: "pass2"}}},
			want: config.Auth{Type: config.AuthStatic, Realm: config.DefaultRealm, Username: "u", Password: "pw2"},
			refs: []types.NamespacedName{{Namespace: "other", Name: "creds"}}},
		{name: "missing Secret", spec: stnrv1.GatewayConfigSpec{Username: ptr("u"),
			Password: &stnrv1.Password{SecretRef: &stnrv1.SecretKeyReference{Name: "gone"}}},
			wantErr: "spec.password: Secret ns/gone not found",
			refs:    []types.NamespacedName{{Namespace: "ns", Name: "gone"}}},
		{name: "ephemeral without secret", spec: stnrv1.GatewayConfigSpec{AuthType: ptr("ephemeral")},
			wantErr: "spec.sharedSecret"},
		// A Secret's bytes need not be UTF-8; a credential must be.
		{name: "password Secret key not UTF-8", spec: stnrv1.GatewayConfigSpec{UserName: ptr("u"),
			Password: &stnrv1.Password{SecretRef: &stnrv1.SecretKeyReference{Name: "creds", Namespace: "other", Key: "binary"}}},
			wantErr: "spec.password: is not valid UTF-8",
			refs:    []types.NamespacedName{{Namespace: "other", Name: "creds"}}},
		{name: "authRef secret not UTF-8", spec: stnrv1.GatewayConfigSpec{AuthRef: &gwapiv1.SecretObjectReference{Name: "binauth"}},
			wantErr: "spec.authRef: is not valid UTF-8",
			refs:    []types.NamespacedName{{Namespace: "ns", Name: "binauth"}}},
		{name: "inline sharedSecret not UTF-8", spec: stnrv1.GatewayConfigSpec{AuthType: ptr("ephemeral"), SharedSecret: ptr("s\xff")},
			wantErr: "spec.sharedSecret: is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc := &stnrv1.GatewayConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gc"}, Spec: tc.spec}
			if refs := AuthSecrets(gc); !slices.Equal(refs, tc.refs) {
				t.Errorf("AuthSecrets = %v, want %v", refs, tc.refs)
			}
			got, err := GatewayConfigAuth(gc, secrets)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("auth %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestClassGatewayConfig(t *testing.T) {
	configs := []stnrv1.GatewayConfig{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "gc"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "gc"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "only"}},
	}
	class := func(name string, ns *gwapiv1.Namespace) *gwapiv1.GatewayClass {
		return &gwapiv1.GatewayClass{Spec: gwapiv1.GatewayClassSpec{ParametersRef: &gwapiv1.ParametersReference{
			Group: stnrv1.GroupName, Kind: "GatewayConfig", Name: name, Namespace: ns}}}
	}
	for _, tc := range []struct {
		name    string
		class   *gwapiv1.GatewayClass
		want    string // namespace/name
		wantErr string
	}{
		{"by namespace", class("gc", ptr(gwapiv1.Namespace("b"))), "b/gc", ""},
		{"unique name", class("only", nil), "b/only", ""},
		{"ambiguous name", class("gc", nil), "", "two GatewayConfigs"},
		{"not found", class("gc", ptr(gwapiv1.Namespace("c"))), "", "GatewayConfig c/gc not found"},
		{"no parametersRef", &gwapiv1.GatewayClass{}, "", "spec.parametersRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClassGatewayConfig(tc.class, configs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := got.Namespace + "/" + got.Name; n != tc.want {
				t.Errorf("got %s, want %s", n, tc.want)
			}
		})
	}
}
