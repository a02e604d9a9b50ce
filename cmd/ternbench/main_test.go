package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for cmd := range commands {
			if !strings.Contains(out.String(), "  "+cmd+" ") {
				t.Errorf("%v: usage does not list %s", args, cmd)
			}
		}
	}
	// Every command's -h prints its flags and exits 0, without running it.
	for cmd := range commands {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "-h"}, &out, &errOut); code != 0 {
			t.Errorf("%s -h: exit %d; stderr:\n%s", cmd, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"nope"}, &out, &errOut); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}
