package enginetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// T0 returns the start of every scenario.
func T0() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Harness holds the state of one scenario file.
type Harness struct {
	spec   topo.Spec
	tree   queue.TreeSpec
	trees  bool
	E      *engine.Engine
	now    time.Time
	last   engine.Ready
	haveRd bool
	site   engine.SiteConfig // the "site" command's, for the next "engine"
	// cfg and policyName: the engine's Config, for "restart".
	cfg        engine.Config
	policyName string
}

// New returns an empty harness.
func New() *Harness { return &Harness{now: T0()} }

// Run runs one scenario file.
func Run(t *testing.T, path string) {
	h := New()
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		return h.Handle(t, d)
	})
}

// Handle runs one command and returns its output.
func (h *Harness) Handle(t testing.TB, d *datadriven.TestData) string {
	out, err := h.handle(d)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return out
}

// handler runs one command. needsEngine: the command needs the "engine"
// command to have run.
type handler struct {
	needsEngine bool
	run         func(h *Harness, d *datadriven.TestData) (string, error)
}

// handlers maps each command to its handler; each lives in its own file
// (handle_<command>.go).
var handlers = map[string]handler{
	"cluster":    {false, (*Harness).handleCluster},
	"add-node":   {false, (*Harness).handleAddNode},
	"queues":     {false, (*Harness).handleQueues},
	"engine":     {false, (*Harness).handleEngine},
	"submit":     {true, (*Harness).handleSubmit},
	"adopt":      {true, (*Harness).handleAdopt},
	"devices":    {true, (*Harness).handleDevices},
	"books":      {true, (*Harness).handleBooks},
	"tick":       {true, (*Harness).handleTick},
	"finish":     {true, (*Harness).handleJobEvent},
	"cancel":     {true, (*Harness).handleJobEvent},
	"checkpoint": {true, (*Harness).handleJobEvent},
	"node":       {true, (*Harness).handleNode},
	"fail-node":  {true, (*Harness).handleFailNode},
	"ready":      {true, (*Harness).handleReady},
	"advance":    {true, (*Harness).handleAdvance},
	"view":       {true, (*Harness).handleView},
	"explain":    {true, (*Harness).handleExplain},

	"service-set":    {true, (*Harness).handleServiceSet},
	"service-scale":  {true, (*Harness).handleServiceScale},
	"service-delete": {true, (*Harness).handleServiceDelete},
	"services":       {true, (*Harness).handleServices},
	"restart":        {true, (*Harness).handleRestart},
}

func (h *Harness) handle(d *datadriven.TestData) (string, error) {
	hd, ok := handlers[d.Cmd]
	if !ok {
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	if hd.needsEngine {
		if err := h.needEngine(); err != nil {
			return "", err
		}
	}
	return hd.run(h, d)
}

func arg(d *datadriven.TestData, k string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == k {
			return strings.Join(a.Vals, ","), true
		}
	}
	return "", false
}

func (h *Harness) needEngine() error {
	if h.E == nil {
		return fmt.Errorf("no engine: run \"engine\" first")
	}
	return nil
}
