package berth_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMESnippets checks that every Go snippet of the README is, word
// for word, one of the files named here: example test files, so that each
// snippet compiles and its output is checked by go test.
func TestREADMESnippets(t *testing.T) {
	files := []string{"gang/example_readme_test.go", "engine/example_readme_test.go"}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```\n").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) != len(files) {
		t.Fatalf("README has %d Go snippets, want %d (one per file of %v)", len(blocks), len(files), files)
	}
	for i, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := blocks[i][1]; got != string(want) {
			t.Errorf("README snippet %d differs from %s (copy the file into the README): %s", i+1, f, firstDiff(got, string(want)))
		}
	}
}

// firstDiff describes the first line where a and b differ.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: README %q, file %q", i+1, x, y)
		}
	}
	return "same lines"
}
