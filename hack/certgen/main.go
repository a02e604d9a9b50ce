// Command certgen writes a self-signed certificate and key for local TLS
// and DTLS listeners (127.0.0.1, ::1 and localhost). `make certs` runs it;
// the output folder is git-ignored: keys are never committed.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tern-gw/tern/internal/selfsigned"
)

func main() {
	dir := flag.String("out", "certs", "folder to write tls.crt and tls.key into")
	days := flag.Int("days", 365, "validity in days")
	flag.Parse()
	if err := write(*dir, *days); err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
}

func write(dir string, days int) error {
	crt, k, err := selfsigned.Write(dir, "tern local", time.Duration(days)*24*time.Hour)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s (self-signed for 127.0.0.1, ::1, localhost; %d days)\n", crt, k, days)
	return nil
}
