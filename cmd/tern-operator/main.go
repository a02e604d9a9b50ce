// Command tern-operator is Tern's control plane. With no arguments it runs
// the controller against the cluster; `tern-operator render -f <manifests>`
// prints, without a cluster, the objects it would create; `tern-operator
// --version` prints its version.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/tern-gw/tern/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches on the subcommand and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, version.String("tern-operator"))
		return 0
	}
	if len(args) > 0 && args[0] == "render" {
		return runRender(args[1:], stdin, stdout, stderr)
	}
	// Controller mode: no arguments, `run`, or run's flags alone (run.go).
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	return runOperator(args, stderr)
}
