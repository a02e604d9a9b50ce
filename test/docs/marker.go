// Package docs runs the command blocks of README.md and docs/*.md that
// claim an outcome, as written, and checks that outcome. A block opts in
// with a marker, an HTML comment on the line right before its opening
// fence (docs/README.md, "Tested command blocks", describes the syntax):
//
//	<!-- doctest: ternd=deploy/examples/local.yaml needs=curl expect="200" -->
//	```sh
//	curl -s -o /dev/null -w '%{http_code}\n' 127.0.0.1:8086/ready
//	```
//
// The package has only tests; this file is the marker parser, kept out of
// _test.go files so its own table test and the runner share it.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// markerPrefix opens a marker; the comment closes with "-->" on the same line.
const markerPrefix = "<!-- doctest:"

// Block is one marked command block of a Markdown file.
type Block struct {
	// File and Line locate the block's opening fence (Line is 1-based).
	File string
	Line int
	// Script is the block's text, run with bash as written.
	Script string
	// Marker holds what the marker asks for.
	Marker
}

// Marker is what a doctest marker asks for. The zero value runs the block
// and requires only that bash exits 0.
type Marker struct {
	// Expect holds texts the block's output (stdout and stderr together)
	// must contain; directive expect="...", repeatable.
	Expect []string
	// Ternd is a dataplane config file (relative to the repository root)
	// that a ternd built from this module serves while the block runs;
	// directive ternd=path.
	Ternd string
	// Needs are commands the block runs that must be on PATH; directive
	// needs=a,b. Missing ones skip the block, or fail it under CI=true.
	Needs []string
	// Ports are ports the block itself binds (udp:3480, tcp:9000),
	// checked free before it runs; directive ports=udp:3480,udp:3481.
	Ports []string
	// Root: the block needs uid 0 (skip, or fail under CI=true, without).
	Root bool
	// Cluster: the block runs against a Tern install on the real-node
	// cluster, so TestDocBlocks leaves it to TestDocBlocksOnCluster
	// (test/cluster), which runs it there with kubectl and the cluster's
	// network; directive cluster.
	Cluster bool
	// Skip says why the block is never run by the test (it needs a
	// cluster, say); directive skip="reason". The marker still documents
	// that the block was looked at.
	Skip string
	// RetryIf: when the block fails and its output contains this text,
	// it is run once more, with the first output logged (for a tool's own
	// rare random failure); directive retry-if="...".
	RetryIf string
	// Timeout bounds one run of the block; directive timeout=90s. Default
	// two minutes.
	Timeout time.Duration
}

// ParseMarker parses the directives of one marker line (the whole line,
// "<!-- doctest: ... -->"). An unknown directive or a malformed value is
// an error naming it, so a typo cannot silently drop a check.
func ParseMarker(line string) (Marker, error) {
	m := Marker{Timeout: 2 * time.Minute}
	s := strings.TrimSpace(line)
	if !strings.HasPrefix(s, markerPrefix) || !strings.HasSuffix(s, "-->") {
		return m, fmt.Errorf("a marker is one line: %s ... -->", markerPrefix)
	}
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, markerPrefix), "-->"))
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			break
		}
		end := strings.IndexAny(s, "= \t")
		if end < 0 {
			end = len(s)
		}
		key := s[:end]
		s = s[end:]
		if !strings.HasPrefix(s, "=") {
			// The directives without a value.
			switch key {
			case "root":
				m.Root = true
			case "cluster":
				m.Cluster = true
			default:
				return m, fmt.Errorf("directive %q needs a value (%s=...)", key, key)
			}
			continue
		}
		s = s[1:]
		var val string
		var err error
		if strings.HasPrefix(s, `"`) {
			q, qerr := strconv.QuotedPrefix(s)
			if qerr != nil {
				return m, fmt.Errorf("directive %s: unterminated or malformed quoted value", key)
			}
			val, _ = strconv.Unquote(q)
			s = s[len(q):]
		} else {
			end := strings.IndexAny(s, " \t")
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		switch key {
		case "expect":
			if val == "" {
				return m, fmt.Errorf("directive expect: empty text")
			}
			m.Expect = append(m.Expect, val)
		case "ternd":
			m.Ternd = val
		case "needs":
			m.Needs = append(m.Needs, strings.Split(val, ",")...)
		case "ports":
			for _, p := range strings.Split(val, ",") {
				proto, port, ok := strings.Cut(p, ":")
				if _, perr := strconv.ParseUint(port, 10, 16); !ok || (proto != "udp" && proto != "tcp") || perr != nil {
					return m, fmt.Errorf("directive ports: %q: want udp:<port> or tcp:<port>", p)
				}
				m.Ports = append(m.Ports, p)
			}
		case "skip":
			m.Skip = val
		case "retry-if":
			m.RetryIf = val
		case "timeout":
			if m.Timeout, err = time.ParseDuration(val); err != nil || m.Timeout <= 0 {
				return m, fmt.Errorf("directive timeout: %q: want a positive Go duration", val)
			}
		default:
			return m, fmt.Errorf("unknown directive %q (want expect, ternd, needs, ports, root, cluster, skip, retry-if or timeout)", key)
		}
	}
	return m, nil
}

// Blocks returns the marked command blocks of the Markdown file path. A
// marker must be followed at once by an opening fence (```sh or ```bash);
// anything else is an error, as is a malformed marker or a block that
// never closes.
func Blocks(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []Block
		pending *Marker
		markAt  int
		cur     *Block
		body    []string
		inFence bool // inside an unmarked fenced block, whose text is not looked at
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case cur != nil:
			if isFence(trim) {
				cur.Script = strings.Join(body, "\n") + "\n"
				out = append(out, *cur)
				cur, body = nil, nil
				continue
			}
			body = append(body, line)
		case inFence:
			inFence = !isFence(trim)
		case pending != nil:
			if trim != "```sh" && trim != "```bash" {
				return nil, fmt.Errorf("%s:%d: a doctest marker must be followed at once by a ```sh or ```bash fence, got %q", path, markAt, line)
			}
			cur = &Block{File: path, Line: n, Marker: *pending}
			pending = nil
		case strings.HasPrefix(trim, markerPrefix):
			m, err := ParseMarker(trim)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			pending, markAt = &m, n
		case isFence(trim):
			inFence = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if pending != nil || cur != nil {
		return nil, fmt.Errorf("%s: the doctest block at line %d never closes", path, markAt)
	}
	return out, nil
}

// isFence reports whether a trimmed line opens or closes a fenced code
// block: three or more backticks and an info string without backticks
// (CommonMark), so a line that starts with inline code such as
// "```` ```sh ````" is not one.
func isFence(trim string) bool {
	rest := strings.TrimLeft(trim, "`")
	return len(trim)-len(rest) >= 3 && !strings.Contains(rest, "`")
}
