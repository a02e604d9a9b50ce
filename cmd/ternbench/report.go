package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/report"
)

func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("o", "BENCHMARKS.md", "markdown file to write")
	plots := fs.String("plots", "bench/results", "directory for the plots (SVG)")
	rel := fs.String("plots-rel", "", "how the markdown links the plot directory (default: -plots)")
	commands := fs.String("commands", "", "file whose text is shown as the commands to reproduce")
	profile := fs.String("profile", "", "markdown file explaining missed goals with profiles (e.g. bench/PROFILE.md)")
	metrics := fs.String("metrics", "", "throughput results of ternd beside ternd-nometrics, for the metrics on/off section")
	offload := fs.String("offload", "", "comma list of results of -netns runs with ternd-offload, for the offload section (issue 15)")
	offloadCmds := fs.String("offload-commands", "", "file whose text is shown as the commands reproducing -offload")
	offloadProf := fs.String("offload-profile", "", "markdown file with the profile behind the offload goals (e.g. bench/PROFILE-offload.md)")
	cluster := fs.String("cluster", "", "markdown file with the real cluster's figures, shown as it is (e.g. bench/CLUSTER.md)")
	tls443 := fs.String("tls443", "", "comma list of results of ternd beside ternd-443 over TLS (flows) and of https443, for the section on TURN-TLS and HTTPS on one port (issue 23)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 && *offload == "" {
		return fmt.Errorf("give the results JSON files to merge")
	}
	r, err := bench.ReadReports(fs.Args()...)
	if err != nil {
		return err
	}
	var cmds string
	if *commands != "" {
		b, err := os.ReadFile(*commands)
		if err != nil {
			return err
		}
		cmds = string(b)
	}
	var prof string
	if *profile != "" {
		b, err := os.ReadFile(*profile)
		if err != nil {
			return err
		}
		prof = string(b)
	}
	var mr *bench.Report
	if *metrics != "" {
		if mr, err = bench.ReadReports(*metrics); err != nil {
			return err
		}
	}
	var or *bench.Report
	if *offload != "" {
		if or, err = bench.ReadReports(strings.Split(*offload, ",")...); err != nil {
			return err
		}
	}
	var ocmds string
	if *offloadCmds != "" {
		b, err := os.ReadFile(*offloadCmds)
		if err != nil {
			return err
		}
		ocmds = string(b)
	}
	var oprof string
	if *offloadProf != "" {
		b, err := os.ReadFile(*offloadProf)
		if err != nil {
			return err
		}
		oprof = string(b)
	}
	var clus string
	if *cluster != "" {
		b, err := os.ReadFile(*cluster)
		if err != nil {
			return err
		}
		clus = string(b)
	}
	var tr *bench.Report
	if *tls443 != "" {
		if tr, err = bench.ReadReports(strings.Split(*tls443, ",")...); err != nil {
			return err
		}
	}
	link := *rel
	if link == "" {
		link = *plots
	}
	files, err := report.Plots(r, *plots)
	if err != nil {
		return err
	}
	md, err := report.Markdown(r, report.Options{PlotDir: link, Plots: files, Commands: cmds, Profile: prof, Metrics: mr, Offload: or, OffloadCommands: ocmds, OffloadProfile: oprof, Cluster: clus, TLS443: tr})
	if err != nil {
		return err
	}
	bench.PrintTable(os.Stdout, r)
	return os.WriteFile(*out, md, 0o644)
}
