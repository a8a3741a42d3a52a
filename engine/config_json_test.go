package engine_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// engine.Config without its Policy (an interface: name it in a config
// file, package config) round-trips through JSON: limits as amounts or
// "unlimited", enums by name.
func TestConfigJSONRoundTrip(t *testing.T) {
	cfg := engine.Config{
		Cluster: topo.Spec{Nodes: []topo.NodeSpec{
			{Name: "n0", GPUs: 8, State: topo.Draining},
			{Name: "n1", GPUs: 4, Sharing: mig.Sharing{Mode: mig.MPS, Replicas: 4}},
		}},
		Queues: queue.TreeSpec{
			Cohorts: []queue.CohortSpec{{Name: "c"}},
			Queues: []queue.QueueSpec{{Name: "q", Cohort: "c", Quota: map[queue.ResourceName]queue.Quota{
				queue.GPUMilli: {Nominal: queue.WholeGPUs(8), BorrowingLimit: queue.Cap(queue.WholeGPUs(2)), LendingLimit: queue.NoLimit()},
			}}},
			HalfLife: time.Hour,
		},
		Backfill:    engine.BackfillConfig{Mode: engine.BackfillConservative, Depth: 4},
		NodeFailure: engine.FailOnFailure,
		Site: engine.SiteConfig{
			Partitions: []engine.Partition{{Name: "p", Nodes: []string{"n0"}, Domains: []engine.DomainRef{{Level: "rack", Name: "r0"}},
				MaxRuntime: time.Hour, PreemptMode: engine.PreemptOff, AllowAccounts: []string{"a"}}},
			Limits:   engine.Limits{MaxJobsPerUser: 2, Accounts: map[string]int{"a": 8}},
			NeverMet: engine.HoldNeverMet,
		},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"BorrowingLimit":2000`, `"LendingLimit":"unlimited"`, `"Mode":"conservative"`,
		`"NodeFailure":"fail"`, `"State":"draining"`, `"Mode":"mps"`, `"PreemptMode":"off"`, `"NeverMet":"hold"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	var back engine.Config
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, back) {
		t.Fatalf("round trip differs:\n%+v\n%+v", cfg, back)
	}
	var l queue.Limit
	if err := json.Unmarshal([]byte(`{}`), &l); err == nil {
		t.Fatal(`{} read as a limit; want an error, not a silent "unlimited"`)
	}
}
