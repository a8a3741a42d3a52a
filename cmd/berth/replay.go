package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/berthsched/berth/benchmarks"
	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/replay/metrics"
	"github.com/berthsched/berth/topo"
	"github.com/berthsched/berth/workload"
)

// loaded is one workload: its jobs per seed (one entry when the jobs do
// not depend on the seed) and its cluster.
type loaded struct {
	spec      traceSpec
	name      string
	cluster   replay.Cluster
	trace     []workload.Job // a trace read once
	dropped   int            // dropped by the loader
	droppedBy map[string]int // the loader's drops by reason
	warnings  []string       // the loader's warnings (a truncated last line)
	// topo is the cluster of workloads that bring their own (openb's node
	// list, synthetic-mig's MIG nodes); empty: cluster's uniform shape.
	topo topo.Spec
	// migNodes is synthetic-mig's node count.
	migNodes int
}

// gpus is the cluster's GPU count.
func (l *loaded) gpus() int {
	if len(l.topo.Nodes) == 0 {
		return l.cluster.GPUs()
	}
	n := 0
	for i := range l.topo.Nodes {
		n += l.topo.Nodes[i].GPUs
	}
	return n
}

func (l *loaded) jobs(seed int64, gpus int) ([]workload.Job, error) {
	if l.spec.kind == "synthetic-mig" {
		c := l.migConfig()
		c.Seed = uint64(seed)
		js, _, err := replay.SyntheticMIG(c)
		return js, err
	}
	if l.spec.kind != "synthetic" {
		return l.trace, nil
	}
	c := workload.DefaultSynthetic()
	c.Seed = uint64(seed)
	c.ClusterGPUs = gpus
	if l.spec.jobs > 0 {
		c.Jobs = l.spec.jobs
	}
	return workload.Synthetic(c)
}

func (l *loaded) migConfig() replay.SyntheticMIGConfig {
	c := replay.DefaultSyntheticMIG()
	if l.migNodes > 0 {
		// Whole-GPU jobs and fractional jobs scale with the cluster.
		c.WholeJobs = max(1, c.WholeJobs*l.migNodes/c.Nodes)
		c.FracJobs = c.FracJobs * l.migNodes / c.Nodes
		c.Nodes = l.migNodes
	}
	if l.spec.jobs > 0 {
		c.FracJobs = l.spec.jobs
	}
	return c
}

// seedDependent reports whether seeds change the replay: generated jobs
// or inflated estimates.
func (l *loaded) seedDependent(o *options) bool {
	return l.spec.kind == "synthetic" || l.spec.kind == "synthetic-mig" || o.estFactor > 1
}

func load(o *options, t traceSpec) (*loaded, error) {
	l := &loaded{spec: t, name: t.name()}
	defNodes := 64
	switch t.kind {
	case workload.KindITP, workload.KindSWF, workload.KindOpenb:
		tr, err := workload.Open(t.kind, t.path)
		if err != nil {
			return nil, err
		}
		l.trace, l.dropped, l.warnings = tr.Jobs, len(tr.Dropped), tr.Warnings
		for _, d := range tr.Dropped {
			if l.droppedBy == nil {
				l.droppedBy = map[string]int{}
			}
			l.droppedBy["trace: "+d.Reason]++
		}
		if t.kind == workload.KindOpenb {
			if l.topo, err = replay.OpenbSpec(tr.Nodes); err != nil {
				return nil, err
			}
			return l, nil
		}
		if t.kind == workload.KindSWF {
			defNodes = 16
			if n, ok := tr.HeaderInt("MaxProcs"); ok && n > 0 {
				defNodes = (n + o.gpn - 1) / o.gpn
			}
		}
	case "month":
		// The standard month (benchmarks.MonthConfig: seed 42, load 0.9 of
		// B12K, ITP cluster04's sizes and runtimes) on B12K, generated
		// once: every policy replays the same jobs.
		mc, err := benchmarks.MonthConfig(t.days)
		if err != nil {
			return nil, usagef("%v", err)
		}
		if l.trace, err = workload.Synthetic(mc); err != nil {
			return nil, err
		}
		l.topo = benchmarks.B12K().Spec()
		return l, nil
	case "synthetic-mig":
		if o.nodes == 1 {
			return nil, usagef("--nodes: synthetic-mig needs at least 2 nodes (half of them in MIG mode)")
		}
		l.migNodes = o.nodes
		_, sp, err := replay.SyntheticMIG(l.migConfig())
		if err != nil {
			return nil, usagef("%v", err)
		}
		l.topo = sp
		return l, nil
	}
	c, err := clusterFor(o.nodes, o.gpn, o.racks, defNodes)
	if err != nil {
		return nil, err
	}
	l.cluster = c
	return l, nil
}

// row is one (workload, policy) line of the output: means over seeds.
type row struct {
	workload string
	res      metrics.Result
	dropped  int
	// droppedBy counts dropped by reason (loader's, then the replay's).
	droppedBy map[string]int
	first     replay.Result // the first seed's run, for plots
	placement string        // --placement's, or empty
}

func runReplays(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	var ws []*loaded
	for _, t := range o.traces {
		l, err := load(o, t)
		if err != nil {
			return err
		}
		for _, w := range l.warnings {
			fmt.Fprintf(stderr, "berth: warning: %s\n", w)
		}
		ws = append(ws, l)
	}
	type key struct{ w, pl, p int }
	placements := o.placements
	if len(placements) == 0 {
		placements = []string{""}
	}
	var cfgs []replay.Config
	var keys []key
	for wi, l := range ws {
		seeds := o.seeds
		if !l.seedDependent(o) {
			seeds = seeds[:1]
		}
		for li, pl := range placements {
			for pi, p := range o.policies {
				for _, seed := range seeds {
					jobs, err := l.jobs(seed, l.cluster.GPUs())
					if err != nil {
						return err
					}
					cfgs = append(cfgs, replay.Config{
						Workload: l.name, Jobs: jobs, Cluster: l.cluster, Spec: l.topo, Policy: p,
						EstimateFactor: o.estFactor, EstimateSeed: uint64(seed),
						Placement: pl, Price: o.price,
					})
					keys = append(keys, key{wi, li, pi})
				}
			}
		}
	}

	if o.shardN > 0 && o.accounting != "" {
		return usagef("--accounting records one replay; it does not go with --shard")
	}
	if o.shardN > 0 && len(o.placements) > 0 {
		return usagef("--placement does not go with --shard (the shard documents carry no placement)")
	}
	if o.shardN > 0 {
		wOf, rowOf := make([]int, len(keys)), make([]int, len(keys))
		for i, k := range keys {
			wOf[i], rowOf[i] = k.w, k.w*len(o.policies)+k.p
		}
		return runShard(ctx, o, ws, wOf, rowOf, cfgs, stdout)
	}
	var sink *accountingSink
	if o.accounting != "" {
		if len(cfgs) != 1 {
			return usagef("--accounting records one replay: name one --policy and one seed (%d replays asked)", len(cfgs))
		}
		var err error
		if sink, err = newAccountingSink(o.accounting); err != nil {
			return err
		}
		cfgs[0].Recorder = sink
	}

	sizes := make([]int64, len(cfgs))
	for i := range cfgs {
		sizes[i] = int64(len(cfgs[i].Jobs))
	}
	pb := newReplayBar(sizes)
	for i := range cfgs {
		cfgs[i].Progress = func(n int) { pb.progress(i, n) }
		cfgs[i].Done = func() { pb.end(i) }
	}
	bar := startReplayBar(stderr, progressOn(o.progress, stderr), pb)
	start := time.Now()
	results, err := replay.RunMany(ctx, cfgs, o.parallel)
	bar.stop()
	if err != nil {
		if sink != nil {
			os.Remove(o.accounting) // created empty before the replay
		}
		return err
	}
	elapsed := time.Since(start)
	if sink != nil {
		n, err := sink.write(ctx)
		if err != nil {
			return fmt.Errorf("--accounting %s: %w", o.accounting, err)
		}
		fmt.Fprintf(stderr, "berth: %d accounting records in %s\n", n, o.accounting)
	}

	var rows []row
	for wi, l := range ws {
		for li, pl := range placements {
			for pi := range o.policies {
				var rs []metrics.Result
				var first *replay.Result
				for i, k := range keys {
					if k == (key{wi, li, pi}) {
						rs = append(rs, results[i].Result)
						if first == nil {
							first = &results[i]
						}
					}
				}
				by := map[string]int{}
				for k, v := range l.droppedBy {
					by[k] += v
				}
				for k, v := range first.DroppedBy {
					by[k] += v
				}
				rows = append(rows, row{workload: l.name, res: replay.MeanResult(rs), dropped: l.dropped + first.Dropped,
					droppedBy: by, first: *first, placement: pl})
			}
		}
	}
	if err := writeRows(stdout, o, ws, rows, elapsed); err != nil {
		return err
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		files, err := plotReplays(o.out, rows)
		if err != nil {
			return err
		}
		if o.format == "table" {
			fmt.Fprintf(stdout, "\nplots: %d files in %s\n", len(files), o.out)
		}
	}
	return nil
}
