package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/operator/render"
)

// fileList is a repeatable -f flag.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(s string) error { *f = append(*f, s); return nil }

const renderUsage = `usage: tern-operator render -f <file|dir|-> [-f ...] [--status] [--controller-name name] [--placeholders=false]

Reads Gateway API and stunner.l7mp.io/v1 manifests (multi-document YAML;
a directory means its *.yaml, *.yml and *.json files; - means stdin) and
prints, as YAML, every object tern-operator would apply for each Gateway
(ServiceAccount, Role, RoleBinding, ConfigMap, Service, Deployment), with
no cluster. Objects the manifests do not hold
are taken as absent, except the default Dataplane, which is assumed as
deploy/ installs it, and, unless --placeholders=false, the Secrets and
Services the manifests refer to: each stands in as a placeholder (credentials
and certificates read TERN-PLACEHOLDER, Services have no addresses) with a
note on stderr. Problems go to stderr; the exit code is 1 if any is an
error, 2 for bad usage or unreadable input.

With --status, prints the whole rendering instead: dataplane configs,
objects, the status of classes, Gateways and routes, and the problems.
`

// runRender implements `tern-operator render`.
func runRender(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, renderUsage) }
	var files fileList
	fs.Var(&files, "f", "manifest file, directory or - for stdin (repeatable)")
	status := fs.Bool("status", false, "print the whole rendering, status and problems included")
	controller := fs.String("controller-name", render.DefaultControllerName, "controllerName of the GatewayClasses to render")
	placeholders := fs.Bool("placeholders", true, "stand in for referenced Secrets and Services the input lacks")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(files) == 0 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}

	data, err := readManifests(files, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "tern-operator render: %v\n", err)
		return 2
	}
	in, ignored, err := render.Decode(bytes.NewReader(data))
	if err != nil {
		fmt.Fprintf(stderr, "tern-operator render: %v\n", err)
		return 2
	}
	for _, s := range ignored {
		fmt.Fprintf(stderr, "note: ignored %s\n", s)
	}
	in.WithDefaultDataplane()
	if *placeholders {
		for _, n := range in.WithPlaceholders() {
			fmt.Fprintf(stderr, "note: %s\n", n)
		}
	}
	res := render.Render(in, render.Options{ControllerName: *controller})

	if *status {
		out, err := yaml.Marshal(res)
		if err != nil {
			fmt.Fprintf(stderr, "tern-operator render: %v\n", err)
			return 2
		}
		stdout.Write(out)
	} else if err := writeObjects(stdout, res); err != nil {
		fmt.Fprintf(stderr, "tern-operator render: %v\n", err)
		return 2
	}
	if len(res.Gateways) == 0 {
		fmt.Fprintf(stderr, "note: no Gateway of a GatewayClass with controllerName %s\n", *controller)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(stderr, "%s: %s\n", strings.ToLower(string(p.Severity)), p.Error())
	}
	if res.HasErrors() {
		return 1
	}
	return 0
}

// writeObjects prints every rendered object as one YAML document, in the order the controller
// applies them; render returns them complete, so this is what lands in the cluster.
func writeObjects(w io.Writer, res *render.Result) error {
	first := true
	for i := range res.Gateways {
		for _, obj := range res.Gateways[i].Objects() {
			out, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			if !first {
				if _, err := io.WriteString(w, "---\n"); err != nil {
					return err
				}
			}
			first = false
			if _, err := w.Write(out); err != nil {
				return err
			}
		}
	}
	return nil
}

// readManifests concatenates the named files (a directory's manifest files
// in name order, stdin for "-") into one multi-document stream.
func readManifests(names []string, stdin io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	add := func(data []byte) {
		buf.WriteString("\n---\n")
		buf.Write(data)
	}
	for _, name := range names {
		if name == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("stdin: %w", err)
			}
			add(data)
			continue
		}
		st, err := os.Stat(name)
		if err != nil {
			return nil, err
		}
		paths := []string{name}
		if st.IsDir() {
			paths = nil
			entries, err := os.ReadDir(name)
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				switch filepath.Ext(e.Name()) {
				case ".yaml", ".yml", ".json":
					if !e.IsDir() {
						paths = append(paths, filepath.Join(name, e.Name()))
					}
				}
			}
			sort.Strings(paths)
			if len(paths) == 0 {
				return nil, errors.New(name + ": no .yaml, .yml or .json files")
			}
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			add(data)
		}
	}
	return buf.Bytes(), nil
}
