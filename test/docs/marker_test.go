package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseMarker(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       Marker
		wantErr    string
	}{
		{name: "empty", line: "<!-- doctest: -->", want: Marker{Timeout: 2 * time.Minute}},
		{name: "every directive",
			line: `<!-- doctest: ternd=deploy/examples/local.yaml needs=curl,turnutils_peer ports=udp:3480,tcp:9000 expect="Total lost packets 0" expect="a \"quoted\" b" root retry-if="error 400" timeout=90s -->`,
			want: Marker{Ternd: "deploy/examples/local.yaml", Needs: []string{"curl", "turnutils_peer"}, Ports: []string{"udp:3480", "tcp:9000"},
				Expect: []string{"Total lost packets 0", `a "quoted" b`}, Root: true, RetryIf: "error 400", Timeout: 90 * time.Second}},
		{name: "skip", line: `<!-- doctest: skip="needs a cluster" -->`, want: Marker{Skip: "needs a cluster", Timeout: 2 * time.Minute}},
		{name: "unknown directive", line: `<!-- doctest: expct="x" -->`, wantErr: `unknown directive "expct"`},
		{name: "cluster", line: `<!-- doctest: cluster expect="ok" -->`, want: Marker{Cluster: true, Expect: []string{"ok"}, Timeout: 2 * time.Minute}},
		{name: "bare word", line: `<!-- doctest: ternd -->`, wantErr: `"ternd" needs a value`},
		{name: "unterminated quote", line: `<!-- doctest: expect="x -->`, wantErr: "malformed quoted value"},
		{name: "empty expect", line: `<!-- doctest: expect="" -->`, wantErr: "empty text"},
		{name: "bad port", line: `<!-- doctest: ports=3480 -->`, wantErr: "udp:<port>"},
		{name: "bad timeout", line: `<!-- doctest: timeout=soon -->`, wantErr: "Go duration"},
		{name: "not closed", line: `<!-- doctest: expect="x"`, wantErr: "one line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMarker(tc.line)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestBlocks(t *testing.T) {
	write := func(t *testing.T, text string) string {
		p := filepath.Join(t.TempDir(), "doc.md")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write(t, "# Doc\n```` ```sh ```` is inline code, not a fence\n```sh\nunmarked\n```\n\n```\n<!-- doctest: a marker shown in a block is not one -->\n```\n<!-- doctest: expect=\"hi\" -->\n```sh\necho hi\necho there\n```\n<!-- doctest: skip=\"cluster\" -->\n```bash\nkubectl get pods\n```\n")
	got, err := Blocks(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Line != 11 || got[0].Script != "echo hi\necho there\n" || got[0].Expect[0] != "hi" ||
		got[1].Skip != "cluster" || got[1].Script != "kubectl get pods\n" {
		t.Fatalf("blocks %+v", got)
	}
	for name, text := range map[string]string{
		"marker before prose":  "<!-- doctest: expect=\"x\" -->\nsome prose\n```sh\necho x\n```\n",
		"marker before yaml":   "<!-- doctest: expect=\"x\" -->\n```yaml\na: b\n```\n",
		"block never closes":   "<!-- doctest: expect=\"x\" -->\n```sh\necho x\n",
		"malformed marker":     "<!-- doctest: nope=1 -->\n```sh\necho x\n```\n",
		"marker at end of doc": "text\n<!-- doctest: expect=\"x\" -->\n",
	} {
		if _, err := Blocks(write(t, text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
