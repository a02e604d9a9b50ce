package config

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// maxSecretFileBytes bounds what ReadSecretFiles accepts from a credential
// file: a password or shared secret is a few dozen bytes, and a file much
// larger than that is a wrong path (a certificate, a log), not a secret.
const maxSecretFileBytes = 4096

// ReadSecretFiles returns a copy of a with Password and SharedSecret read
// from PasswordFile and SharedSecretFile, for the files a's type uses
// (static: PasswordFile; ephemeral: SharedSecretFile); a without such files
// is returned as is. readFile is os.ReadFile in ternd.
//
// One trailing newline ("\n" or "\r\n") is dropped, as a file written with
// echo or an editor ends in one; a Secret value the operator writes has
// none. An empty file, a file over 4 KiB, one that is not valid UTF-8, or
// one that cannot be read is an error that names the field and the path, so
// a broken mount is reported instead of serving with an empty password.
func (a Auth) ReadSecretFiles(readFile func(string) ([]byte, error)) (Auth, error) {
	read := func(field, path string) (string, error) {
		data, err := readFile(path)
		if err != nil {
			return "", fmt.Errorf("auth.%s: %w", field, err)
		}
		if len(data) > maxSecretFileBytes {
			return "", fmt.Errorf("auth.%s: %s is %d bytes, more than a credential (at most %d)", field, path, len(data), maxSecretFileBytes)
		}
		if d, ok := bytes.CutSuffix(data, []byte("\n")); ok {
			data = bytes.TrimSuffix(d, []byte("\r"))
		}
		if len(data) == 0 {
			return "", fmt.Errorf("auth.%s: %s is empty", field, path)
		}
		// As Validate requires of inline credentials: a credential is a
		// UTF-8 string (RFC 8489 §14.3), as every client sends it.
		if !utf8.Valid(data) {
			return "", fmt.Errorf("auth.%s: %s is not valid UTF-8 (credentials are UTF-8 strings, RFC 8489 §14.3)", field, path)
		}
		return string(data), nil
	}
	var err error
	switch t, _ := NormalizeAuthType(a.Type); {
	case t == AuthStatic && a.PasswordFile != "":
		a.Password, err = read("passwordFile", a.PasswordFile)
	case t == AuthEphemeral && a.SharedSecretFile != "":
		a.SharedSecret, err = read("sharedSecretFile", a.SharedSecretFile)
	}
	return a, err
}

// SecretFiles returns the credential files ReadSecretFiles reads for a, to
// be watched for changes; none when the credentials are inline.
func (a Auth) SecretFiles() []string {
	switch t, _ := NormalizeAuthType(a.Type); {
	case t == AuthStatic && a.PasswordFile != "":
		return []string{a.PasswordFile}
	case t == AuthEphemeral && a.SharedSecretFile != "":
		return []string{a.SharedSecretFile}
	}
	return nil
}
