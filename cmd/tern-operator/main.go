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

const usage = `usage: tern-operator [command] [flags]

commands:
  run       run the controller against the cluster (the default when no command is given)
  render    print, without a cluster, the objects the controller would apply for manifests
  version   print the version (also --version)
  help      print this help (also -h, --help)

tern-operator <command> -h prints the command's flags.
`

// run dispatches on the subcommand and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stdout, usage)
		return 0
	}
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
