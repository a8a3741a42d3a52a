package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/berthsched/berth/replay"
	"github.com/berthsched/berth/replay/metrics"
)

// A sweep (workloads x policies x seeds, in that nesting) is split for
// `berth replay --shard K/N` by run index: shard K of N runs the runs whose
// index i has i mod N = K-1, so that every shard gets a share of each
// policy and workload. It prints its runs as a shard document; `berth
// merge` reads the N documents back and prints what the unsharded command
// would have printed with --format json or csv.

// shardFormat is the version of the shard document.
const shardFormat = 1

// shardDoc is what a shard prints.
type shardDoc struct {
	Format int `json:"berth_shard"`
	Shard  int `json:"shard"`  // K, 1-based
	Shards int `json:"shards"` // N
	// Compare: the sweep was `berth compare` (rows carry a workload).
	Compare bool `json:"compare"`
	// Sweep names every run of the whole sweep, by index: it must be the
	// same in every shard of one merge.
	Sweep []string   `json:"sweep"`
	Runs  []shardRun `json:"runs"`
}

// shardRun is one replay of the sweep. Result keeps the Go field names
// and nanosecond durations, so that merging averages exactly the numbers
// the unsharded run averages.
type shardRun struct {
	Index          int            `json:"index"`
	Row            int            `json:"row"` // the output row it counts in
	Workload       string         `json:"workload"`
	Policy         string         `json:"policy"`
	Seed           uint64         `json:"seed"`
	Result         rawResult      `json:"result"`
	Dropped        int            `json:"dropped"`
	DroppedReasons map[string]int `json:"dropped_reasons"`
}

// rawResult is metrics.Result without its MarshalJSON (which writes
// seconds as floats): a lossless encoding.
type rawResult metrics.Result

// parseShard reads "K/N" (1 <= K <= N <= 10000).
func parseShard(s string) (k, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		k, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || n < 1 || n > 10000 || k < 1 || k > n {
		return 0, 0, usagef("--shard %q: want K/N with 1 <= K <= N <= 10000", s)
	}
	return k, n, nil
}

// runKey names run i of a sweep in the shard document's Sweep.
func runKey(c *replay.Config) string {
	return fmt.Sprintf("%s/%s/%d", c.Workload, c.Policy, c.EstimateSeed)
}

// runShard runs shard o.shardK of o.shardN of the sweep cfgs (with their
// workloads by index) and prints its shard document.
func runShard(ctx context.Context, o *options, ws []*loaded, wOf, rowOf []int, cfgs []replay.Config, stdout io.Writer) error {
	doc := shardDoc{Format: shardFormat, Shard: o.shardK, Shards: o.shardN, Compare: o.compare, Sweep: make([]string, len(cfgs)), Runs: []shardRun{}}
	var mine []replay.Config
	var idx []int
	for i := range cfgs {
		doc.Sweep[i] = runKey(&cfgs[i])
		if i%o.shardN == o.shardK-1 {
			mine = append(mine, cfgs[i])
			idx = append(idx, i)
		}
	}
	results, err := replay.RunMany(ctx, mine, o.parallel)
	if err != nil {
		return err
	}
	for j, r := range results {
		i := idx[j]
		l := ws[wOf[i]]
		by := map[string]int{}
		for k, v := range l.droppedBy {
			by[k] += v
		}
		for k, v := range r.DroppedBy {
			by[k] += v
		}
		doc.Runs = append(doc.Runs, shardRun{
			Index: i, Row: rowOf[i], Workload: cfgs[i].Workload, Policy: cfgs[i].Policy, Seed: cfgs[i].EstimateSeed,
			Result: rawResult(r.Result), Dropped: l.dropped + r.Dropped, DroppedReasons: by,
		})
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(b, '\n'))
	return err
}

const mergeUsage = `Usage: berth merge [--format json|csv] SHARD.json...

Merges the shard documents of one sweep (berth replay --shard K/N or
berth compare --shard K/N, K = 1..N) and prints the rows the unsharded
command prints with the same --format: means over seeds per workload and
policy. Every run of the sweep must be in exactly one document.
`

// cmdMerge is `berth merge`.
func cmdMerge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("berth merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "json", "output: json or csv")
	fs.Usage = func() { fmt.Fprint(stderr, mergeUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if *format != "json" && *format != "csv" {
		return usagef("--format %q: want json or csv", *format)
	}
	if fs.NArg() == 0 {
		return usagef("no shard files (see berth merge -h)")
	}
	var docs []shardDoc
	for _, name := range fs.Args() {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var d shardDoc
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return fmt.Errorf("%s: not a shard document: %w", name, err)
		}
		if d.Format != shardFormat {
			return fmt.Errorf("%s: shard format %d, want %d", name, d.Format, shardFormat)
		}
		docs = append(docs, d)
	}
	rows, compare, err := mergeShards(docs, fs.Args())
	if err != nil {
		return err
	}
	if *format == "csv" {
		return writeCSV(stdout, compare, false, rows)
	}
	return writeJSON(stdout, compare, rows)
}

// mergeShards checks that docs are the shards of one sweep, each run
// once, and returns its rows as runReplays builds them.
func mergeShards(docs []shardDoc, names []string) ([]row, bool, error) {
	first := docs[0]
	runs := make([]*shardRun, len(first.Sweep))
	for di := range docs {
		d := &docs[di]
		if !slices.Equal(d.Sweep, first.Sweep) || d.Compare != first.Compare {
			return nil, false, fmt.Errorf("%s and %s are shards of different sweeps", names[0], names[di])
		}
		for ri := range d.Runs {
			r := &d.Runs[ri]
			if r.Index < 0 || r.Index >= len(runs) || runKey(&replay.Config{Workload: r.Workload, Policy: r.Policy, EstimateSeed: r.Seed}) != first.Sweep[r.Index] {
				return nil, false, fmt.Errorf("%s: run %d does not belong to the sweep", names[di], r.Index)
			}
			if runs[r.Index] != nil {
				return nil, false, fmt.Errorf("%s: run %d (%s) is in two shard files", names[di], r.Index, first.Sweep[r.Index])
			}
			runs[r.Index] = r
		}
	}
	var missing []string
	for i, r := range runs {
		if r == nil {
			missing = append(missing, first.Sweep[i])
		}
	}
	if len(missing) > 0 {
		return nil, false, fmt.Errorf("%d runs of the sweep are in no shard file (first: %s): merge every shard K/N, K = 1..N", len(missing), missing[0])
	}
	// The sweep nests seeds innermost, so a row's runs are consecutive.
	var rows []row
	for i := 0; i < len(runs); {
		j := i
		var rs []metrics.Result
		for ; j < len(runs) && runs[j].Row == runs[i].Row; j++ {
			rs = append(rs, metrics.Result(runs[j].Result))
		}
		f := runs[i]
		rows = append(rows, row{workload: f.Workload, res: replay.MeanResult(rs), dropped: f.Dropped, droppedBy: f.DroppedReasons})
		i = j
	}
	return rows, first.Compare, nil
}
