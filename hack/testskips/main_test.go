package main

import (
	"os"
	"strings"
	"testing"
)

// testdata/sample.json is `go test -json ./...` of three packages: one
// with skips (one in a subtest) and a passing test that logs, one with a
// failing test and a skip, one that does not build.
func TestFilter(t *testing.T) {
	in, err := os.Open("testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out strings.Builder
	if err := filter(in, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"ok  \ttsk/a",
		"FAIL\ttsk/c [build failed]",
		"undefined: undefined",
		"--- FAIL: TestFail (0.00s)\n    b_test.go:3: before\n    b_test.go:3: boom\n",
		"FAIL\ttsk/b",
		"== skipped tests: 3\n" +
			"SKIP tsk/a TestA: a_test.go:3: no cluster here: start it\n" +
			"SKIP tsk/a TestB/sub: a_test.go:4: sub 2\n" +
			"SKIP tsk/b TestSkipToo: b_test.go:4: later\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"=== RUN", "chatter", "--- PASS", "--- SKIP"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q (go test without -v hides it):\n%s", not, got)
		}
	}
}
