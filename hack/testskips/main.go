// Command testskips reads `go test -json` on its standard input and prints
// what `go test` without -v prints (each package's result line, the output
// of the tests that failed, build errors), then a summary of the tests
// that were skipped, each with its reason (the message of its t.Skip):
//
//	go test -json ./... | go run ./hack/testskips
//
// hack/test.sh runs its `go test` steps through it. It exits 0 whatever
// the tests did (the exit status is go test's: run it under
// `set -o pipefail`), and 1 on input that is not test2json.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// skip is one skipped test and why.
type skip struct {
	Package, Test, Reason string
}

func main() {
	if err := filter(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testskips:", err)
		os.Exit(1)
	}
}

// filter copies the readable part of in to out as it comes, and the
// summary of skips at the end.
func filter(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	buf := map[[2]string][]string{} // package, test -> its output so far
	var skips []skip
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			// Not an event (a line go test prints itself): pass it on.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := [2]string{ev.Package, ev.Test}
		switch ev.Action {
		case "build-output":
			fmt.Fprint(out, ev.Output)
		case "output":
			if ev.Test == "" {
				if ev.Output != "PASS\n" && !strings.HasPrefix(ev.Output, "=== ") {
					fmt.Fprint(out, ev.Output)
				}
				continue
			}
			buf[key] = append(buf[key], ev.Output)
		case "fail":
			if ev.Test != "" {
				// As go test prints it: the --- FAIL line, then the
				// test's log.
				for _, o := range buf[key] {
					if strings.HasPrefix(strings.TrimSpace(o), "--- FAIL") {
						fmt.Fprint(out, o)
					}
				}
				for _, o := range buf[key] {
					if t := strings.TrimSpace(o); !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- FAIL") {
						fmt.Fprint(out, o)
					}
				}
			}
			delete(buf, key)
		case "skip":
			if ev.Test != "" {
				skips = append(skips, skip{ev.Package, ev.Test, reason(buf[key])})
			}
			delete(buf, key)
		case "pass":
			delete(buf, key)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, "== skipped tests: %d\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(out, "SKIP %s %s: %s\n", s.Package, s.Test, s.Reason)
	}
	return nil
}

// reason is the message of a skipped test: its output but the === and
// --- lines, on one line.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}
