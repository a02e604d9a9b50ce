package authservice

import (
	"testing"
	"time"
)

// TestMint checks credentials against vectors computed outside Go, with OpenSSL:
//
//	printf '%s' "$username" | openssl dgst -sha1 -hmac "$secret" -binary | base64
//
// e.g. printf '%s' 1700000000:alice | openssl dgst -sha1 -hmac s3cr3t -binary | base64
// prints 81mjszbESz91Gv1n2xG/SVLX+uY= (Python's hmac module agrees).
func TestMint(t *testing.T) {
	for _, tc := range []struct {
		secret, user string
		expiry       time.Time
		wantUser     string
		wantPass     string
	}{
		{"s3cr3t", "alice", time.Unix(1700000000, 0), "1700000000:alice", "81mjszbESz91Gv1n2xG/SVLX+uY="},
		// The expiry is truncated to whole seconds; an empty user leaves the trailing colon.
		{"my-shared-secret", "", time.Date(2025, 1, 1, 0, 0, 0, 999_000_000, time.UTC), "1735689600:", "30bxkIA7y9Xfha8FUdon7tuHeIQ="},
		{"my-shared-secret", "user@example.com", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), "4102444800:user@example.com", "0PtQdZCb7KuMFI6cUGAOhjoypAE="},
	} {
		user, pass := Mint(tc.secret, tc.user, tc.expiry)
		if user != tc.wantUser || pass != tc.wantPass {
			t.Errorf("Mint(%q, %q, %v) = %q, %q; want %q, %q", tc.secret, tc.user, tc.expiry, user, pass, tc.wantUser, tc.wantPass)
		}
	}
	// A username with no user part: printf '%s' 1700000000 | openssl dgst -sha1 -hmac key -binary | base64
	if got, want := Password("key", "1700000000"), "3PR30lJDmKSJIqXfeKMkgYPNOQU="; got != want {
		t.Errorf("Password(key, 1700000000) = %q, want %q", got, want)
	}
}
