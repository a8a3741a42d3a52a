package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/berthsched/berth/config"
)

const configUsage = `Usage:
  berth config check [--format yaml|json] FILE

Checks a berth configuration file (YAML or JSON; see docs/config.md) and
prints the effective settings: the file with every default written out.
A fault is reported with its field and line, and the exit code is 1.

Examples:
  berth config check examples/config/k8s-platform.yaml
  berth config check --format json examples/config/slurm-site.yaml
`

// cmdConfig runs `berth config SUBCOMMAND`.
func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, configUsage)
		return usagef("missing subcommand (want check)")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, configUsage)
		return nil
	}
	if args[0] != "check" {
		return usagef("unknown subcommand %q (want check)", args[0])
	}
	fs := flag.NewFlagSet("berth config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, configUsage) }
	format := fs.String("format", "yaml", "output: yaml or json")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one FILE, got %d arguments", fs.NArg())
	}
	if *format != "yaml" && *format != "json" {
		return usagef("--format: want yaml or json, got %q", *format)
	}
	path := fs.Arg(0)
	f, err := config.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	cfg, err := f.Build()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	gpus := 0
	for _, n := range cfg.Cluster.Nodes {
		gpus += n.GPUs
	}
	eff := f.Effective()
	var out []byte
	if *format == "json" {
		out, err = eff.JSON()
	} else {
		out, err = eff.YAML()
	}
	if err != nil {
		return err
	}
	// The summary is a YAML comment, so the YAML output reads back as a
	// config; with JSON it goes to stderr.
	head := stdout
	if *format == "json" {
		head = stderr
	}
	fmt.Fprintf(head, "# %s: valid: %d nodes, %d GPUs, %d queues, %d cohorts; effective settings:\n",
		path, len(cfg.Cluster.Nodes), gpus, len(cfg.Queues.Queues), len(cfg.Queues.Cohorts))
	_, err = stdout.Write(out)
	return err
}
