package main

import (
	"os"
	"strings"
	"testing"
)

// What the example prints is what examples/README.md says it does: a
// 16 x 8-GPU gang placed in one block, and why a 24 x 8-GPU one fits in
// no block.
func TestPlaceMatchesREADME(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"placed 16 workers in block", "24-node gang: group 0: at most 21 of 24 members fit in any block"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"place a 16 x 8-GPU gang inside one block", "why a 24 x 8-GPU gang fits in no block"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("examples/README.md lacks %q", want)
		}
	}
}
