package render

import (
	"errors"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// Keys read from the Secret a GatewayConfig's authRef names. STUNner's are
// type, username, password and secret; userName and sharedSecret are
// accepted as the spellings of the GatewayConfig fields.
var (
	authKeysType     = []string{"type"}
	authKeysUsername = []string{"username", "userName"}
	authKeysPassword = []string{"password"}
	authKeysSecret   = []string{"secret", "sharedSecret"}
)

// resolveAuth returns the dataplane auth of a GatewayConfig: inline fields
// first, then what its authRef Secret holds, which overrides them (the
// reference's rule). It reports every problem on the GatewayConfig and
// returns ok false when the credentials are unusable.
//
// authType longterm is an alias of ephemeral (TURN REST API credentials
// derived from a sharedSecret). Adopters also write longterm with a
// username and password and no sharedSecret, meaning RFC 8489's long-term
// credential mechanism with one fixed password: that is static auth, so
// Tern renders it as static and says so in a warning, instead of failing
// for a missing sharedSecret.
func (r *renderer) resolveAuth(gc *stnrv1.GatewayConfig) (auth config.Auth, ps []Problem, ok bool) {
	ref := gatewayConfigRef(gc)
	spec := &gc.Spec
	bad := func(field, format string, args ...any) {
		ps = append(ps, r.problems.errorf(ref, field, format, args...))
	}

	auth.Realm = config.DefaultRealm
	if spec.Realm != nil && *spec.Realm != "" {
		auth.Realm = *spec.Realm
	}
	typ, typField := "", "spec.authType"
	if spec.AuthType != nil {
		typ = *spec.AuthType
	}
	user, userField := deref(spec.Username), "spec.username"
	if spec.UserName != nil && *spec.UserName != "" {
		if user != "" && user != *spec.UserName {
			bad("spec.userName", "differs from spec.username (%q vs %q): set only one", *spec.UserName, user)
		}
		user, userField = *spec.UserName, "spec.userName"
	}
	pass, passField := "", "spec.password"
	// passGiven: a password was specified, even if it could not be read;
	// it decides how longterm is read, so a missing Secret is reported as
	// such and not as a missing sharedSecret.
	passGiven := spec.Password != nil
	if p := spec.Password; p != nil {
		if p.Invalid != "" {
			bad("spec.password", "%s", p.Invalid)
		} else if p.SecretRef != nil {
			pass = r.secretKey(ref, "spec.password", gc.Namespace, p.SecretRef, &ps)
		} else {
			pass = p.Value
		}
	}
	secret, secretField := deref(spec.SharedSecret), "spec.sharedSecret"

	if a := spec.AuthRef; a != nil {
		if (a.Group != nil && *a.Group != "") || (a.Kind != nil && *a.Kind != "Secret") {
			bad("spec.authRef", "must refer to a core Secret")
		} else {
			ns := gc.Namespace
			if a.Namespace != nil && *a.Namespace != "" {
				ns = string(*a.Namespace)
			}
			s := r.secrets[nsName(ns, string(a.Name))]
			if s == nil {
				bad("spec.authRef", "Secret %s/%s not found", ns, a.Name)
			} else {
				// A value taken from the Secret is blamed on spec.authRef.
				pick := func(keys []string, val, field *string) {
					for _, k := range keys {
						if v, found := s.Data[k]; found && len(v) > 0 {
							*val, *field = string(v), "spec.authRef"
							return
						}
					}
				}
				pick(authKeysType, &typ, &typField)
				pick(authKeysUsername, &user, &userField)
				pick(authKeysPassword, &pass, &passField)
				passGiven = passGiven || pass != ""
				pick(authKeysSecret, &secret, &secretField)
			}
		}
	}

	if typ == "" {
		typ = config.AuthStatic
	}
	norm, err := config.NormalizeAuthType(typ)
	if err != nil {
		bad(typField, "%v", err)
		return auth, ps, false
	}
	if strings.EqualFold(typ, "longterm") && secret == "" && user != "" && passGiven {
		ps = append(ps, r.problems.warnf(ref, typField,
			"longterm with a username and password and no sharedSecret: using static auth with that password (RFC 8489 long-term credentials); set sharedSecret for time-limited credentials"))
		norm = config.AuthStatic
	}
	auth.Type = norm
	// A Secret's bytes may be anything, but a credential is a UTF-8 string
	// (RFC 8489 §14.3) and the rendered config is JSON, which would turn
	// other bytes into U+FFFD: refused, naming the field the value came
	// from, never quoting it.
	utf8Field := func(field, v string) {
		if !utf8.ValidString(v) {
			bad(field, "is not valid UTF-8 (credentials are UTF-8 strings, RFC 8489 §14.3)")
		}
	}
	switch norm {
	case config.AuthStatic:
		utf8Field(userField, user)
		utf8Field(passField, pass)
		if user == "" {
			bad(userField, "static auth needs a username")
		}
		if pass == "" && !(passGiven && hasError(ps)) { // else already said why
			bad(passField, "static auth needs a password")
		}
		auth.Username, auth.Password = user, pass
	case config.AuthEphemeral:
		utf8Field(secretField, secret)
		if secret == "" {
			bad("spec.sharedSecret", "ephemeral auth needs a sharedSecret (inline or as key secret of the authRef Secret)")
		}
		auth.SharedSecret = secret
	}
	return auth, ps, !hasError(ps)
}

// secretKey returns the value of a Secret key a field refers to, or "" with
// a problem naming the field.
func (r *renderer) secretKey(obj ObjectRef, field, defaultNS string, ref *stnrv1.SecretKeyReference, ps *[]Problem) string {
	ns, key := ref.Namespace, ref.Key
	if ns == "" {
		ns = defaultNS
	}
	if key == "" {
		key = "password"
	}
	s := r.secrets[nsName(ns, ref.Name)]
	if s == nil {
		*ps = append(*ps, r.problems.errorf(obj, field, "Secret %s/%s not found", ns, ref.Name))
		return ""
	}
	v, ok := s.Data[key]
	if !ok || len(v) == 0 {
		*ps = append(*ps, r.problems.errorf(obj, field, "Secret %s/%s has no key %q", ns, ref.Name, key))
		return ""
	}
	return string(v)
}

func hasError(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == SeverityError {
			return true
		}
	}
	return false
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// GatewayConfigAuth returns the dataplane auth that Render derives from gc
// for its Gateways: the same rules (inline fields, the authRef Secret
// overriding them, a password given as a Secret key reference, longterm
// with a password and no sharedSecret read as static). secrets are the
// Secrets it may read (AuthSecrets names them; others are ignored). The
// error joins every problem that makes the credentials unusable, each
// naming the GatewayConfig field at fault; no problem quotes a credential.
// Credential issuers such as the operator's auth service use it, so they
// mint what the dataplane checks.
func GatewayConfigAuth(gc *stnrv1.GatewayConfig, secrets []corev1.Secret) (config.Auth, error) {
	r := newRenderer(&Input{Secrets: secrets}, Options{}.withDefaults())
	auth, ps, ok := r.resolveAuth(gc)
	if ok {
		return auth, nil
	}
	var errs []error
	for _, p := range errorsOnly(ps) {
		errs = append(errs, p)
	}
	return config.Auth{}, errors.Join(errs...)
}

// AuthSecrets returns the Secrets GatewayConfigAuth may read for gc: its
// authRef and its password's Secret key reference, each defaulting to gc's
// namespace.
func AuthSecrets(gc *stnrv1.GatewayConfig) []types.NamespacedName {
	var out []types.NamespacedName
	if a := gc.Spec.AuthRef; a != nil {
		ns := gc.Namespace
		if a.Namespace != nil && *a.Namespace != "" {
			ns = string(*a.Namespace)
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: string(a.Name)})
	}
	if p := gc.Spec.Password; p != nil && p.SecretRef != nil {
		ns := p.SecretRef.Namespace
		if ns == "" {
			ns = gc.Namespace
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: p.SecretRef.Name})
	}
	return out
}

// ClassGatewayConfig returns the GatewayConfig a GatewayClass's
// parametersRef names among configs, by the rules Render applies (see
// resolveClass), or an error naming the field at fault.
func ClassGatewayConfig(class *gwapiv1.GatewayClass, configs []stnrv1.GatewayConfig) (*stnrv1.GatewayConfig, error) {
	r := newRenderer(&Input{GatewayConfigs: configs}, Options{}.withDefaults())
	cs := r.resolveClass(class)
	if cs.accepted() {
		return cs.config, nil
	}
	var errs []error
	for _, p := range cs.problems {
		errs = append(errs, p)
	}
	return nil, errors.Join(errs...)
}

// hasCredentials reports whether gc names any credential or where to find
// one: a username, password, shared secret or authRef.
func hasCredentials(gc *stnrv1.GatewayConfig) bool {
	s := &gc.Spec
	return deref(s.Username) != "" || deref(s.UserName) != "" || s.Password != nil ||
		deref(s.SharedSecret) != "" || s.AuthRef != nil
}

// realmOf is gc's realm, or the default one.
func realmOf(gc *stnrv1.GatewayConfig) string {
	if r := deref(gc.Spec.Realm); r != "" {
		return r
	}
	return config.DefaultRealm
}
