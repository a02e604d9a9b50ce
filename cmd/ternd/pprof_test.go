package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestPprofEndpoints(t *testing.T) {
	srv := httptest.NewServer(pprofMux())
	defer srv.Close()
	get := func(path string, status int) []byte {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != status {
			t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, b, status)
		}
		return b
	}
	gzipMagic := []byte{0x1f, 0x8b}

	if b := get("/debug/pprof/", 200); !bytes.Contains(b, []byte(" heap\n")) || !bytes.Contains(b, []byte(" goroutine\n")) {
		t.Errorf("index lists no heap or goroutine profile:\n%s", b)
	}
	for _, p := range []string{"/debug/pprof/heap?gc=1", "/debug/pprof/allocs", "/debug/pprof/goroutine", "/debug/pprof/profile?seconds=1"} {
		if b := get(p, 200); !bytes.HasPrefix(b, gzipMagic) {
			t.Errorf("GET %s: not a gzipped profile: %q", p, b[:min(len(b), 32)])
		}
	}
	if b := get("/debug/pprof/goroutine?debug=1", 200); !bytes.Contains(b, []byte("goroutine profile: total")) {
		t.Errorf("goroutine?debug=1:\n%s", b)
	}
	if b := get("/debug/pprof/trace?seconds=0.1", 200); len(b) == 0 {
		t.Error("empty trace")
	}
	if b := get("/debug/pprof/cmdline", 200); string(b) != strings.Join(os.Args, "\x00") {
		t.Errorf("cmdline = %q", b)
	}
	pc, _, _, _ := runtime.Caller(0)
	if b := get(fmt.Sprintf("/debug/pprof/symbol?%#x", pc), 200); !bytes.Contains(b, []byte("TestPprofEndpoints")) {
		t.Errorf("symbol:\n%s", b)
	}
	get("/debug/pprof/nosuch", 404)
	get("/debug/pprof/heap?seconds=5", 400)
}
