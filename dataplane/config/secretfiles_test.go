package config

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

func TestReadSecretFiles(t *testing.T) {
	files := map[string]string{
		"/s/password":     "hunter2",
		"/s/newline":      "hunter2\n",
		"/s/crlf":         "hunter2\r\n",
		"/s/two":          "hunter2\n\n",
		"/s/empty":        "",
		"/s/only-newline": "\n",
		"/s/big":          strings.Repeat("x", maxSecretFileBytes+1),
	}
	readFile := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	for _, tc := range []struct {
		name      string
		auth      Auth
		want      Auth
		wantErr   string
		wantWatch []string
	}{
		{name: "inline static", auth: Auth{Type: AuthStatic, Username: "u", Password: "p"}, want: Auth{Type: AuthStatic, Username: "u", Password: "p"}},
		{name: "static file", auth: Auth{Type: AuthStatic, Username: "u", PasswordFile: "/s/password"},
			want: Auth{Type: AuthStatic, Username: "u", Password: "hunter2", PasswordFile: "/s/password"}, wantWatch: []string{"/s/password"}},
		{name: "alias type", auth: Auth{Type: "plaintext", PasswordFile: "/s/password"},
			want: Auth{Type: "plaintext", Password: "hunter2", PasswordFile: "/s/password"}, wantWatch: []string{"/s/password"}},
		{name: "trailing newline dropped", auth: Auth{Type: AuthStatic, PasswordFile: "/s/newline"},
			want: Auth{Type: AuthStatic, Password: "hunter2", PasswordFile: "/s/newline"}, wantWatch: []string{"/s/newline"}},
		{name: "trailing CRLF dropped", auth: Auth{Type: AuthStatic, PasswordFile: "/s/crlf"},
			want: Auth{Type: AuthStatic, Password: "hunter2", PasswordFile: "/s/crlf"}, wantWatch: []string{"/s/crlf"}},
		{name: "only one newline dropped", auth: Auth{Type: AuthStatic, PasswordFile: "/s/two"},
			want: Auth{Type: AuthStatic, Password: "hunter2\n", PasswordFile: "/s/two"}, wantWatch: []string{"/s/two"}},
		{name: "ephemeral file", auth: Auth{Type: AuthEphemeral, SharedSecretFile: "/s/password"},
			want: Auth{Type: AuthEphemeral, SharedSecret: "hunter2", SharedSecretFile: "/s/password"}, wantWatch: []string{"/s/password"}},
		{name: "file of the other type unread", auth: Auth{Type: AuthEphemeral, SharedSecret: "s", PasswordFile: "/nope"},
			want: Auth{Type: AuthEphemeral, SharedSecret: "s", PasswordFile: "/nope"}},
		{name: "missing file", auth: Auth{Type: AuthStatic, PasswordFile: "/nope"}, wantErr: "auth.passwordFile: open /nope: file does not exist", wantWatch: []string{"/nope"}},
		{name: "empty file", auth: Auth{Type: AuthEphemeral, SharedSecretFile: "/s/empty"}, wantErr: "auth.sharedSecretFile: /s/empty is empty", wantWatch: []string{"/s/empty"}},
		{name: "newline only", auth: Auth{Type: AuthStatic, PasswordFile: "/s/only-newline"}, wantErr: "auth.passwordFile: /s/only-newline is empty", wantWatch: []string{"/s/only-newline"}},
		{name: "too big", auth: Auth{Type: AuthStatic, PasswordFile: "/s/big"}, wantErr: "auth.passwordFile: /s/big is 4097 bytes", wantWatch: []string{"/s/big"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.auth.ReadSecretFiles(readFile)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if tc.name == "missing file" && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("error %v does not wrap fs.ErrNotExist", err)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if w := tc.auth.SecretFiles(); strings.Join(w, ",") != strings.Join(tc.wantWatch, ",") {
				t.Errorf("SecretFiles %q, want %q", w, tc.wantWatch)
			}
		})
	}
}
