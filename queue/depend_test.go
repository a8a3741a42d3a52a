package queue_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berthsched/berth/queue"
)

// Dependencies are written by kind name and read back; unknown kinds are
// refused both ways.
func TestDependencyJSON(t *testing.T) {
	in := []queue.Dependency{{Kind: queue.AfterOK, Job: "a"}, {Kind: queue.AfterNotOK, Job: "b"}, {Kind: queue.Singleton}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"Kind":"afterok"`) || !strings.Contains(string(b), `"Kind":"singleton"`) {
		t.Fatalf("kinds not by name: %s", b)
	}
	var back []queue.Dependency
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if back[i] != in[i] || back[i].String() != in[i].String() {
			t.Fatalf("round trip: %v, want %v", back, in)
		}
	}
	if _, err := json.Marshal(queue.Dependency{Kind: 9}); err == nil {
		t.Fatal("kind 9 written")
	}
	if err := json.Unmarshal([]byte(`{"Kind":"after"}`), &back[0]); err == nil {
		t.Fatal(`kind "after" read`)
	}
}
