package secretfile

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

func TestRead(t *testing.T) {
	files := map[string]string{
		"/s/password":     "hunter2",
		"/s/newline":      "hunter2\n",
		"/s/crlf":         "hunter2\r\n",
		"/s/two":          "hunter2\n\n",
		"/s/empty":        "",
		"/s/only-newline": "\n",
		"/s/big":          strings.Repeat("x", maxBytes+1),
	}
	readFile := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	for _, tc := range []struct {
		name      string
		auth      config.Auth
		want      config.Auth
		wantErr   string
		wantWatch []string
	}{
		{name: "inline static", auth: config.Auth{Type: config.AuthStatic, Username: "u", Password: "p"}, want: config.Auth{Type: config.AuthStatic, Username: "u", Password: "p"}},
		{name: "static file", auth: config.Auth{Type: config.AuthStatic, Username: "u", PasswordFile: "/s/password"},
			want: config.Auth{Type: config.AuthStatic, Username: "u", Password: "hunter2", PasswordFile: "/s/password"}, wantWatch: []string{"/s/password"}},
		{name: "alias type", auth: config.Auth{Type: "plaintext", PasswordFile: "/s/password"},
			want: config.Auth{Type: "plaintext", Password: "hunter2", PasswordFile: "/s/password"}, wantWatch: []string{"/s/password"}},
		{name: "trailing newline dropped", auth: config.Auth{Type: config.AuthStatic, PasswordFile: "/s/newline"},
			want: config.Auth{Type: config.AuthStatic, Password: "hunter2", PasswordFile: "/s/newline"}, wantWatch: []string{"/s/newline"}},
		{name: "trailing CRLF dropped", auth: config.Auth{Type: config.AuthStatic, PasswordFile: "/s/crlf"},
			want: config.Auth{Type: config.AuthStatic, Password: "hunter2", PasswordFile: "/s/crlf"}, wantWatch: []string{"/s/crlf"}},
		{name: "only one newline dropped", auth: config.Auth{Type: config.AuthStatic, PasswordFile: "/s/two"},
			want: config.Auth{Type: config.AuthStatic, Password: "hunter2\n", PasswordFile: "/s/two"}, wantWatch: []string{"/s/two"}},
		{name: "ephemeral file", auth: config.Auth{Type: config.AuthEphemeral, SharedSecretFile: "/s/password"},
			want: config.Auth{Type: config.AuthEphemeral, SharedSecret: "hunter2", SharedSecretFile: "/s/password"}, wantWatch: []string{"/s/password"}},
		{name: "file of the other type unread", auth: config.Auth{Type: config.AuthEphemeral, SharedSecret: "s", PasswordFile: "/nope"},
			want: config.Auth{Type: config.AuthEphemeral, SharedSecret: "s", PasswordFile: "/nope"}},
		{name: "missing file", auth: config.Auth{Type: config.AuthStatic, PasswordFile: "/nope"}, wantErr: "auth.passwordFile: open /nope: file does not exist", wantWatch: []string{"/nope"}},
		{name: "empty file", auth: config.Auth{Type: config.AuthEphemeral, SharedSecretFile: "/s/empty"}, wantErr: "auth.sharedSecretFile: /s/empty is empty", wantWatch: []string{"/s/empty"}},
		{name: "newline only", auth: config.Auth{Type: config.AuthStatic, PasswordFile: "/s/only-newline"}, wantErr: "auth.passwordFile: /s/only-newline is empty", wantWatch: []string{"/s/only-newline"}},
		{name: "too big", auth: config.Auth{Type: config.AuthStatic, PasswordFile: "/s/big"}, wantErr: "auth.passwordFile: /s/big is 4097 bytes", wantWatch: []string{"/s/big"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.auth, readFile)
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
			if w := Files(tc.auth); strings.Join(w, ",") != strings.Join(tc.wantWatch, ",") {
				t.Errorf("Files %q, want %q", w, tc.wantWatch)
			}
		})
	}
}
