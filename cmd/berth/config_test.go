package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthsched/berth/config"
)

// Every example config passes `berth config check`, and what it prints
// (the effective settings) is itself a valid config, in YAML and JSON.
func TestConfigCheckExamples(t *testing.T) {
	ps, err := filepath.Glob("../../examples/config/*.yaml")
	if err != nil || len(ps) < 3 {
		t.Fatalf("examples: %v %v", ps, err)
	}
	for _, p := range ps {
		for _, format := range []string{"yaml", "json"} {
			code, out, errOut := runCLI(t, "config", "check", "--format", format, p)
			if code != 0 {
				t.Fatalf("%s (%s): exit %d: %s", p, format, code, errOut)
			}
			if !strings.Contains(out+errOut, "valid:") {
				t.Fatalf("%s: no summary:\n%s", p, out)
			}
			f, err := config.Read([]byte(out))
			if err != nil {
				t.Fatalf("%s (%s): the printed settings do not read back: %v\n%s", p, format, err, out)
			}
			if f.Engine.Backfill.Mode == "" || f.Engine.Policy.Name == "" || f.Engine.Backfill.Depth == 0 {
				t.Fatalf("%s: defaults not written out: %+v", p, f.Engine)
			}
		}
	}
}

func TestConfigCheckRejects(t *testing.T) {
	base, err := os.ReadFile("../../examples/config/k8s-platform.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct{ from, to, want string }{
		{"borrowingLimit: 2, ", "", "line 45: queues.queues[1].quota.gpu.borrowingLimit: required"},
		{"mode: easy", "mode: fast", "line 54: engine.backfill.mode: unknown mode \"fast\""},
		{"gpus: 8", "gpus: eight", "line 11"},
	} {
		p := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(p, []byte(strings.Replace(string(base), tc.from, tc.to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(t, "config", "check", p)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("%q -> %q: exit %d, stderr %q, want %q", tc.from, tc.to, code, errOut, tc.want)
		}
	}
	if code, _, _ := runCLI(t, "config", "check"); code != 2 {
		t.Fatalf("no file: exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, "config", "check", filepath.Join(dir, "absent.yaml")); code != 1 {
		t.Fatalf("absent file: exit %d, want 1", code)
	}
}

// Every help text fits 99 columns and has examples; `berth version` and
// `berth --version` print the version.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"replay", "-h"}, {"compare", "-h"}, {"help"}, {"config", "--help"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		text := out + errOut
		for line := range strings.Lines(text) {
			if n := len(strings.TrimRight(strings.ReplaceAll(line, "\t", "        "), "\n")); n >= 100 {
				t.Errorf("%v: line of %d columns: %q", args, n, line)
			}
		}
		if args[0] != "help" && !strings.Contains(text, "Examples:") {
			t.Errorf("%v: no examples", args)
		}
	}
	for _, a := range []string{"version", "--version"} {
		code, out, _ := runCLI(t, a)
		if code != 0 || !strings.HasPrefix(out, "berth ") {
			t.Fatalf("%s: exit %d, %q", a, code, out)
		}
	}
}
