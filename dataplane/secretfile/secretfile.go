// Package secretfile reads the credential files a dataplane config names
// (auth.passwordFile, auth.sharedSecretFile): a Kubernetes Secret mounted
// in ternd's pod, so that no credential is stored in the ConfigMap. It is
// ternd's side of the contract: the config only names the files, and
// tern-operator, which renders them, never reads one.
package secretfile

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/tern-gw/tern/dataplane/config"
)

// maxBytes bounds what Read accepts from a credential
// file: a password or shared secret is a few dozen bytes, and a file much
// larger than that is a wrong path (a certificate, a log), not a secret.
const maxBytes = 4096

// Read returns a copy of a with Password and SharedSecret read
// from PasswordFile and SharedSecretFile, for the files a's type uses
// (static: PasswordFile; ephemeral: SharedSecretFile); a without such files
// is returned as is. readFile is os.ReadFile in ternd.
//
// One trailing newline ("\n" or "\r\n") is dropped, as a file written with
// echo or an editor ends in one; a Secret value the operator writes has
// none. An empty file, a file over 4 KiB, one that is not valid UTF-8, or
// one that cannot be read is an error that names the field and the path, so
// a broken mount is reported instead of serving with an empty password.
func Read(a config.Auth, readFile func(string) ([]byte, error)) (config.Auth, error) {
	read := func(field, path string) (string, error) {
		data, err := readFile(path)
		if err != nil {
			return "", fmt.Errorf("auth.%s: %w", field, err)
		}
		if len(data) > maxBytes {
			return "", fmt.Errorf("auth.%s: %s is %d bytes, more than a credential (at most %d)", field, path, len(data), maxBytes)
		}
		if d, ok := bytes.CutSuffix(data, []byte("\n")); ok {
			data = bytes.TrimSuffix(d, []byte("\r"))
		}
		if len(data) == 0 {
			return "", fmt.Errorf("auth.%s: %s is empty", field, path)
		}
		// As config.Validate requires of inline credentials: a credential is a
		// UTF-8 string (RFC 8489 §14.3), as every client sends it.
		if !utf8.Valid(data) {
			return "", fmt.Errorf("auth.%s: %s is not valid UTF-8 (credentials are UTF-8 strings, RFC 8489 §14.3)", field, path)
		}
		return string(data), nil
	}
	var err error
	switch t, _ := config.NormalizeAuthType(a.Type); {
	case t == config.AuthStatic && a.PasswordFile != "":
		a.Password, err = read("passwordFile", a.PasswordFile)
	case t == config.AuthEphemeral && a.SharedSecretFile != "":
		a.SharedSecret, err = read("sharedSecretFile", a.SharedSecretFile)
	}
	return a, err
}

// Files returns the credential files Read reads for a, to be watched for
// changes; none when the credentials are inline.
func Files(a config.Auth) []string {
	switch t, _ := config.NormalizeAuthType(a.Type); {
	case t == config.AuthStatic && a.PasswordFile != "":
		return []string{a.PasswordFile}
	case t == config.AuthEphemeral && a.SharedSecretFile != "":
		return []string{a.SharedSecretFile}
	}
	return nil
}
