package render

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
)

// Where the credentials Secret goes, and its keys.
const (
	// CredentialsDir is where the Deployment mounts the credentials
	// Secret; the config's auth.passwordFile or auth.sharedSecretFile is
	// a file there.
	CredentialsDir = "/etc/tern/auth"
	// CredentialsKeyPassword holds the static password.
	CredentialsKeyPassword = "password"
	// CredentialsKeySharedSecret holds the ephemeral auth's shared secret.
	CredentialsKeySharedSecret = "sharedSecret"
	// credentialsSuffix is appended to the Gateway's name to name its
	// credentials Secret: the other objects take the Gateway's name as it
	// is, but a Secret of that name is a likely TLS or auth Secret of the
	// user's, which the operator must never take over.
	credentialsSuffix = "-tern-auth"
)

// CredentialsSecretName is the name of the Secret holding the credentials
// of gw's dataplane.
func CredentialsSecretName(gw *gwapiv1.Gateway) string { return gw.Name + credentialsSuffix }

// credentialsSecret moves the password or shared secret of auth into a
// Secret of its own, named CredentialsSecretName, and returns auth with
// the file in dir (Options.CredentialsDir) that the Deployment mounts it as
// in its place:
// the ConfigMap, which many more users and tools may read than Secrets,
// then holds no credential. The user's own Secret (authRef, a password
// secretRef) cannot be mounted instead: it may live in another namespace
// (the GatewayConfig's) and uses STUNner's key names.
//
// A rotation in the user's Secret re-renders this one; kubelet updates the
// mounted file and ternd re-reads it (dataplane/credentials.go), with no
// restart.
func credentialsSecret(gw *gwapiv1.Gateway, auth config.Auth, dir string) (config.Auth, *corev1.Secret) {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(gw),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	s.Name = CredentialsSecretName(gw)
	switch auth.Type {
	case config.AuthStatic:
		s.Data[CredentialsKeyPassword] = []byte(auth.Password)
		auth.Password, auth.PasswordFile = "", dir+"/"+CredentialsKeyPassword
	case config.AuthEphemeral:
		s.Data[CredentialsKeySharedSecret] = []byte(auth.SharedSecret)
		auth.SharedSecret, auth.SharedSecretFile = "", dir+"/"+CredentialsKeySharedSecret
	}
	return auth, s
}
