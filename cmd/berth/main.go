// Command berth compares scheduling policies by replaying job traces
// through berth's engine on a simulated cluster.
//
//	berth replay  [flags]   one workload, one or more policies
//	berth compare [flags]   several workloads x policies
//	berth merge SHARD...    the shards of a sweep run with --shard K/N
//
// With no flags, `berth replay` runs the default generated workload (2,000
// jobs after ITP cluster04's statistics, seed 42) on 64 nodes of 8 GPUs
// under fifo, easy, conservative and fairshare, and prints a table.
// `--trace synthetic-mig` mixes in fractional jobs on nodes in MIG mode
// (the engine plans MIG re-layouts, the simulator carries them out);
// `--trace openb` replays the openb pods in time, share pods as fractions
// of GPUs shared on demand. `--experiment fgd --trace openb` runs the FGD
// experiment (docs/fgd.md) instead: pods placed once on arrival by a node
// scorer (random, dotprod, clustering, packing, bestfit, fgd, berth)
// through a gang.Placer, or, with `--via engine`, each pod submitted to an
// engine.Engine configured with that scorer (engine.Config.Scorer), one
// cycle per arrival, which gives the same numbers for the deterministic
// scorers. `--experiment hybrid` runs the hybrid-federation experiment
// (docs/backends/federation.md): training gangs and inference services on
// one cluster, dedicated, static, federated and colocated.
// `--experiment serving` runs the serving experiment (docs/serving.md):
// inference services scaled by the HPA autoscaler (package serving) from a
// day/night traffic model, with training, under --policy no-colocation,
// colocation and colocation-packing. Run
// `berth replay -h` for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"

	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/replay/fgd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const topUsage = `berth compares GPU scheduling policies by replaying job traces.

Usage:
  berth replay  [flags]   replay one workload under one or more policies
  berth compare [flags]   replay several workloads under several policies
  berth config check FILE check a configuration file, print the effective settings
  berth account [flags]   GPU-hours by account, queue, partition or user (accounting database)
  berth audit [flags] JOB where and why jobs ran: nodes, GPUs, driver, image, every step
  berth merge SHARD...    merge the shard documents of a sweep (replay or compare --shard K/N)
  berth version           print the version

Run 'berth COMMAND -h' for the flags of a command.
`

// run is main without the process: it returns the exit code (0 ok, 1 a
// failure, 2 a bad command line).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "replay":
		err = cmdReplay(ctx, args[1:], stdout, stderr, false)
	case "compare":
		err = cmdReplay(ctx, args[1:], stdout, stderr, true)
	case "config":
		err = cmdConfig(args[1:], stdout, stderr)
	case "account":
		err = cmdAccount(ctx, args[1:], stdout, stderr)
	case "audit":
		err = cmdAudit(ctx, args[1:], stdout, stderr)
	case "merge":
		err = cmdMerge(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "berth: unknown command %q\n\n%s", args[0], topUsage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "berth %s: %s\n", args[0], strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	}
	fmt.Fprintf(stderr, "berth %s: %v\n", args[0], err)
	return 1
}

// options are the parsed flags of replay and compare.
type options struct {
	compare    bool
	traces     []traceSpec
	nodes      int
	gpn        int
	racks      int
	policies   []string
	policySet  bool
	seeds      []int64
	estimates  string
	estFactor  float64
	format     string
	out        string
	experiment string
	via        string
	gpuModels  string
	curve      bool
	// preemptOnReclaim: --preempt-on-reclaim (--experiment hybrid).
	preemptOnReclaim bool
	// capacity: --training-p95-wait, --inference-shortfall-pct and
	// --demand (--experiment capacity; capacity.go).
	capacity   capacityOptions
	parallel   int
	progress   string
	accounting string // --accounting FILE: the replay's records into a new SQLite file
	// shardK of shardN: --shard (shard.go); shardN 0: the whole sweep.
	shardK, shardN int
	// placements are --placement's (nil: the engine's default only);
	// price is --price.
	placements []string
	price      replay.Price
}

func parseOptions(args []string, stderr io.Writer, compare bool) (*options, error) {
	name := "replay"
	traceHelp := "workload: synthetic[:N] (whole-GPU jobs after ITP cluster04), synthetic-mig[:N] (whole-GPU jobs plus N fractional jobs\n" +
		"on H100 nodes in MIG mode, split into 1g instances to begin with: the engine plans MIG re-layouts), swf[:PATH], itp[:PATH],\n" +
		"or openb[:DIR] (the openb pods as a time trace on the openb node list, share pods as fractions of GPUs shared on demand;\n" +
		"with --experiment fgd, the FGD experiment); without a path, the shared trace; or month[:DAYS] (the standard month\n" +
		"of docs/scale.md on B12K, generated: 113,800 jobs a day, 30 days unless DAYS)"
	defTrace := "synthetic"
	if compare {
		name = "compare"
		traceHelp = "comma-separated workloads (see berth replay -h); may be repeated"
		defTrace = "synthetic,itp,swf"
	}
	fs := flag.NewFlagSet("berth "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var traces []string
	fs.Func("trace", traceHelp+" (default \""+defTrace+"\")", func(s string) error {
		traces = append(traces, parseList(s)...)
		return nil
	})
	o := &options{compare: compare}
	fs.IntVar(&o.nodes, "nodes", 0, "nodes in the cluster (default: the trace's own size; NASA 16, synthetic-mig 16 (half in MIG mode), others 64;\nopenb: its node list, not settable)")
	fs.IntVar(&o.gpn, "gpus-per-node", 8, "GPUs per node")
	fs.IntVar(&o.racks, "racks", 0, "racks of equal size (default: racks of 8 nodes when the nodes split evenly, else 1)")
	policy := fs.String("policy", strings.Join(replay.DefaultPolicies(), ","),
		"comma-separated policies: "+strings.Join(replay.Policies(), ",")+" (FGD experiment: random,dotprod,clustering,packing,bestfit,fgd,berth;\n"+
			"serving experiment: no-colocation,colocation,colocation-packing, default all)")
	seeds := fs.String("seeds", "42", "seeds: N, LO-HI or a comma list; rows are means over seeds")
	fs.StringVar(&o.estimates, "estimates", "exact", "runtime estimates: exact, trace (the trace's own), or inflated:F (runtime x U[1,F], seeded)")
	fs.StringVar(&o.format, "format", "table", "output: table, json or csv")
	fs.StringVar(&o.out, "out", "", "directory for plots (PNG and SVG); empty: no plots")
	if !compare {
		fs.StringVar(&o.experiment, "experiment", "", "run an experiment instead of a replay: fgd (needs --trace openb[:DIR]), hybrid\n"+
			"(training + inference on one cluster: dedicated, static, federated, colocated; --trace synthetic or itp[:PATH]), or serving\n"+
			"(HPA-scaled inference services + training; --policy no-colocation,colocation,colocation-packing, default all;\n"+
			"--trace synthetic or itp[:PATH]), or capacity (the smallest cluster, or fewest GPU-hours with node autoscaling, that\n"+
			"serves a fixed training + inference demand at --training-p95-wait and --inference-shortfall-pct, per variant of hybrid;\n"+
			"--trace synthetic or itp[:PATH]; --nodes is the reference cluster the demand is drawn for)")
		fs.StringVar(&o.via, "via", "placer", "with --experiment fgd, how pods are placed: placer (a gang.Placer with the policy's scorer) or engine\n"+
			"(each pod submitted to an engine.Engine configured with that scorer, one cycle per arrival; same numbers for the\n"+
			"deterministic policies, random draws from its own stream, clustering is not available)")
		fs.StringVar(&o.gpuModels, "gpu-models", "", "with --experiment fgd, the GPU-model constraint rule: empty (the trace's own gpu_spec),\n"+
			"third (a third of the GPU pods ask for one model, fgd.ConstrainModels), half (half of them ask for one model) or\n"+
			"sets (a third of them accept a set of 2 or 3 models); seeded draws, see docs/fgd.md and fgd.ApplyModelRule")
		fs.StringVar(&o.accounting, "accounting", "", "write the replay's accounting records (one policy, one seed) into this new SQLite file,\n"+
			"for berth account and berth audit")
		fs.BoolVar(&o.curve, "curve", false, "with --experiment fgd and the table format, also print the mean curve at 50, 55, ... 130% arrived")
		o.capacity.flags(fs)
		fs.BoolVar(&o.preemptOnReclaim, "preempt-on-reclaim", false, "with --experiment hybrid or capacity, the federated variants requeue the training jobs on a busy node\n"+
			"the inference pool reclaims (their work is lost) instead of waiting for them to end")
	}
	placement := ""
	price := "off"
	if !compare {
		fs.StringVar(&placement, "placement", "", "compare placements (rows per placement and policy): comma list of berth (gangs prefer one rack),\n"+
			"blind (topology-blind), kueue (Kueue-like greedy); empty: the engine's default placement (docs/price.md)")
		fs.StringVar(&price, "price", "off", "price of placement: off, on (10% runtime per extra rack, 25% per extra block),\n"+
			"or rack=F,block=F (fractions of runtime); runs last longer the more racks they span (docs/price.md)")
	}
	fs.IntVar(&o.parallel, "parallel", runtime.GOMAXPROCS(0), "replays run at once")
	fs.StringVar(&o.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), on, off")
	shard := fs.String("shard", "", "K/N: run only the K-th of N slices of the sweep (workloads x policies x seeds) and print\n"+
		"its runs as a shard document (JSON) for berth merge")
	if compare {
		fs.Usage = usageFunc(fs, stderr, "berth compare [flags]", compareExamples)
	} else {
		fs.Usage = usageFunc(fs, stderr, "berth replay [flags]", replayExamples)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	shapeSet := ""
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "policy":
			o.policySet = true
		case "nodes", "gpus-per-node", "racks":
			shapeSet = f.Name
		case "training-p95-wait", "inference-shortfall-pct", "demand":
			o.capacity.set = true
		}
	})
	if len(traces) == 0 {
		traces = parseList(defTrace)
	}
	for _, s := range traces {
		t, err := parseTrace(s)
		if err != nil {
			return nil, err
		}
		o.traces = append(o.traces, t)
	}
	if !compare && len(o.traces) > 1 {
		return nil, usagef("replay takes one --trace (use berth compare for several)")
	}
	var err error
	if o.seeds, err = parseSeeds(*seeds); err != nil {
		return nil, err
	}
	if o.estFactor, err = parseEstimates(o.estimates); err != nil {
		return nil, err
	}
	if o.format, err = parseFormat(o.format); err != nil {
		return nil, err
	}
	if o.placements, err = parsePlacements(placement); err != nil {
		return nil, err
	}
	if o.price, err = parsePrice(price); err != nil {
		return nil, err
	}
	switch o.progress {
	case "auto", "on", "off":
	default:
		return nil, usagef("--progress %q: want auto, on or off", o.progress)
	}
	switch {
	case o.nodes < 0:
		return nil, usagef("--nodes must not be negative, got %d", o.nodes)
	case o.gpn < 1 || o.gpn > 64:
		return nil, usagef("--gpus-per-node must be in 1..64, got %d", o.gpn)
	case o.racks < 0:
		return nil, usagef("--racks must not be negative, got %d", o.racks)
	case o.parallel < 1:
		return nil, usagef("--parallel must be at least 1, got %d", o.parallel)
	}
	if *shard != "" {
		if o.shardK, o.shardN, err = parseShard(*shard); err != nil {
			return nil, err
		}
		if o.out != "" || o.experiment != "" {
			return nil, usagef("--shard prints a shard document: no --out or --experiment (plots need the whole sweep)")
		}
	}
	if o.out != "" {
		// Fail now, not after the whole replay ran.
		if err := checkOutDir(o.out); err != nil {
			return nil, usagef("--out %s: %v", o.out, err)
		}
	}
	switch o.experiment {
	case "":
		if o.policies, err = parsePolicies(*policy, replay.Policies()); err != nil {
			return nil, err
		}
		for _, t := range o.traces {
			if t.kind == "openb" && shapeSet != "" {
				return nil, usagef("--%s: the openb replay runs on the trace's own node list", shapeSet)
			}
			if t.kind == "month" && shapeSet != "" {
				return nil, usagef("--%s: the month replays on B12K (12,288 nodes of 8 GPUs)", shapeSet)
			}
			if t.kind == "synthetic-mig" && (shapeSet == "gpus-per-node" || shapeSet == "racks") {
				return nil, usagef("--%s: synthetic-mig has nodes of 8 GPUs and no racks (set --nodes only)", shapeSet)
			}
		}
	case "fgd":
		if o.via != "placer" && o.via != "engine" {
			return nil, usagef("--via %q: want placer or engine", o.via)
		}
		if o.traces[0].kind != "openb" {
			return nil, usagef("--experiment fgd needs --trace openb[:DIR]")
		}
		if o.gpuModels != "" && !slices.Contains(fgd.ModelRules, o.gpuModels) {
			return nil, usagef("--gpu-models %q: want one of %s, or nothing", o.gpuModels, strings.Join(fgd.ModelRules, ", "))
		}
		p := *policy
		if !o.policySet {
			p = "random,bestfit,fgd,berth"
		}
		if o.policies, err = parsePolicies(p, fgdPolicies()); err != nil {
			return nil, err
		}
	case "hybrid":
		if err := checkHybrid(o); err != nil {
			return nil, err
		}
	case "serving":
		if err := checkServing(o, *policy); err != nil {
			return nil, err
		}
	case "capacity":
		if err := checkCapacity(o); err != nil {
			return nil, err
		}
	default:
		return nil, usagef("--experiment %q: want fgd, hybrid, serving or capacity", o.experiment)
	}
	if o.capacity.set && o.experiment != "capacity" {
		return nil, usagef("--training-p95-wait, --inference-shortfall-pct and --demand are for --experiment capacity")
	}
	if o.accounting != "" && o.experiment != "" {
		return nil, usagef("--accounting is for replays, not --experiment %s", o.experiment)
	}
	if o.preemptOnReclaim && o.experiment != "hybrid" && o.experiment != "capacity" {
		return nil, usagef("--preempt-on-reclaim is for --experiment hybrid or capacity")
	}
	if o.gpuModels != "" && o.experiment != "fgd" {
		return nil, usagef("--gpu-models is for --experiment fgd")
	}
	if o.via != "" && o.via != "placer" && o.experiment != "fgd" {
		return nil, usagef("--via is for --experiment fgd")
	}
	if (len(o.placements) > 0 || o.price.On()) && o.experiment == "fgd" {
		return nil, usagef("--placement and --price are for time replays, not --experiment fgd")
	}
	if o.via == "engine" && slices.Contains(o.policies, "clustering") {
		return nil, usagef("--via engine: policy clustering counts the kinds bound on each node, which the engine does not report to scorers")
	}
	return o, nil
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer, compare bool) error {
	o, err := parseOptions(args, stderr, compare)
	if err != nil {
		return err
	}
	if o.experiment == "fgd" {
		return runFGD(ctx, o, stdout, stderr)
	}
	if o.experiment == "hybrid" {
		return runHybrid(ctx, o, stdout, stderr)
	}
	if o.experiment == "serving" {
		return runServing(ctx, o, stdout, stderr)
	}
	if o.experiment == "capacity" {
		return runCapacity(ctx, o, stdout, stderr)
	}
	return runReplays(ctx, o, stdout, stderr)
}

// checkOutDir makes dir if needed and checks that a file can be written
// there.
func checkOutDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".berth-out-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	cerr := f.Close()
	if rerr := os.Remove(name); cerr == nil {
		cerr = rerr
	}
	return cerr
}
