package main

import (
	"strings"
	"testing"
)

// The demo says when it runs on a mock, and what that means.
func TestBannerSaysMock(t *testing.T) {
	got := banner("dgxh100", false)
	for _, want := range []string{"MOCK", "dgxh100", "no real GPU"} {
		if !strings.Contains(got, want) {
			t.Errorf("banner %q lacks %q", got, want)
		}
	}
	if got := banner("dgxh100", true); !strings.Contains(got, "MIG mode") {
		t.Errorf("banner %q does not say MIG mode", got)
	}
	if got := banner("", false); strings.Contains(got, "MOCK") {
		t.Errorf("real GPUs called a mock: %q", got)
	}
}
