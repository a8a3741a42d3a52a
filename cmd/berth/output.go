package main

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthsched/berth/replay/metrics"
)

// writeRows prints the rows in o.format. JSON: replay prints an array of
// the metrics rows (policy, utilization, avg_wait_s, ...); compare adds a
// leading "workload" key. CSV: the same columns, with a header.
func writeRows(w io.Writer, o *options, ws []*loaded, rows []row, elapsed time.Duration) error {
	switch o.format {
	case "json":
		return writeJSON(w, o.compare, rows)
	case "csv":
		return writeCSV(w, o.compare, len(o.placements) > 0, rows)
	}
	return writeTable(w, o, ws, rows, elapsed)
}

func writeJSON(w io.Writer, compare bool, rows []row) error {
	var buf bytes.Buffer
	buf.WriteString("[\n")
	for i, r := range rows {
		b, err := json.Marshal(r.res)
		if err != nil {
			return err
		}
		if compare {
			name, err := json.Marshal(r.workload)
			if err != nil {
				return err
			}
			b = append(append([]byte(`{"workload":`), name...), append([]byte{','}, b[1:]...)...)
		}
		// The workload's jobs left out, and why.
		by, err := json.Marshal(r.reasons())
		if err != nil {
			return err
		}
		b = append(b[:len(b)-1], fmt.Sprintf(`,"dropped":%d,"dropped_reasons":%s}`, r.dropped, by)...)
		if r.placement != "" {
			b = append(b[:len(b)-1], fmt.Sprintf(`,"placement":%q}`, r.placement)...)
		}
		buf.WriteString("  ")
		buf.Write(b)
		if i < len(rows)-1 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
	}
	buf.WriteString("]\n")
	_, err := w.Write(buf.Bytes())
	return err
}

func writeCSV(w io.Writer, compare, placements bool, rows []row) error {
	cw := csv.NewWriter(w)
	header := append(metrics.CSVHeader(), "dropped", "dropped_reasons")
	if placements {
		header = append(header, "placement")
	}
	if compare {
		header = append([]string{"workload"}, header...)
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range rows {
		rec := append(r.res.CSVRecord(), strconv.Itoa(r.dropped), r.reasonText(";"))
		if placements {
			rec = append(rec, r.placement)
		}
		if compare {
			rec = append([]string{r.workload}, rec...)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func writeTable(w io.Writer, o *options, ws []*loaded, rows []row, elapsed time.Duration) error {
	var b strings.Builder
	for _, l := range ws {
		jobs := 0
		for _, r := range rows {
			if r.workload == l.name {
				jobs = r.res.Jobs
				break
			}
		}
		if len(l.topo.Nodes) > 0 {
			fmt.Fprintf(&b, "%s: %d jobs on %s, estimates %s, seeds %s\n",
				l.name, jobs, describeTopo(l), o.estimates, seedsString(o.seeds, l.seedDependent(o)))
			continue
		}
		c := l.cluster
		racks := ""
		if c.Racks > 1 {
			racks = fmt.Sprintf(" in %d racks", c.Racks)
		}
		fmt.Fprintf(&b, "%s: %d jobs on %d nodes x %d GPUs (%d)%s, estimates %s, seeds %s\n",
			l.name, jobs, c.Nodes, c.GPUsPerNode, c.GPUs(), racks, o.estimates, seedsString(o.seeds, l.seedDependent(o)))
	}
	b.WriteByte('\n')
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	// Short headers keep the table within 120 columns (the footer explains
	// them).
	head := "policy\tutil\tavg wait\tp95 wait\tavg JCT\tbsld\tmakespan\tpreempt\tfrag\tmax gang\tfinished"
	if o.compare {
		head = "workload\t" + head
	}
	fmt.Fprintln(tw, head)
	// One duration format per column, chosen by the column's largest value.
	var wait, p95, jct, mk durCol
	for _, r := range rows {
		wait.see(r.res.AvgWait)
		p95.see(r.res.P95Wait)
		jct.see(r.res.AvgJCT)
		mk.see(r.res.Makespan)
	}
	for _, r := range rows {
		s := r.res
		line := fmt.Sprintf("%s\t%.1f%%\t%s\t%s\t%s\t%.2f\t%s\t%d\t%.1f\t%d\t%d/%d",
			placementLabel(s.Policy, r.placement), 100*s.Utilization, wait.format(s.AvgWait), p95.format(s.P95Wait), jct.format(s.AvgJCT), s.AvgBSLD,
			mk.format(s.Makespan), s.Preemptions, s.FragFreeGPUs, s.LargestPlaceableGang, s.Finished, s.Jobs)
		if o.compare {
			line = r.workload + "\t" + line
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.price.On() {
		fmt.Fprintf(&b, "\nprice of placement: runtime x (1 + %g x extra racks + %g x extra blocks); first seed's runs:\n",
			o.price.PerRack, o.price.PerBlock)
		for _, r := range rows {
			name := placementLabel(r.res.Policy, r.placement)
			if o.compare {
				name = r.workload + " " + name
			}
			b.WriteString(wrap(priceNote(name, r.first.Price), "  ", helpWidth))
		}
	}
	fractional := false
	for _, r := range rows {
		if r.dropped > 0 && (len(rows) == 0 || r.res.Policy == rows[0].res.Policy) {
			fmt.Fprintf(&b, "\n%s: %d jobs left out: %s\n", r.workload, r.dropped, r.reasonText(", "))
		}
	}
	for _, r := range rows {
		f := &r.first
		if f.Fractional == 0 {
			continue
		}
		if !fractional {
			b.WriteString("\nfractional jobs (first seed's run):\n")
			fractional = true
		}
		name := r.res.Policy
		if o.compare {
			name = r.workload + " " + name
		}
		b.WriteString(wrap(fmt.Sprintf("%s: %d fractional jobs; %d on MIG instances, %d on shares (at most %d on one GPU); "+
			"MIG re-layouts decided %d, applied %d, refused %d (instances created %d, destroyed %d)",
			name, f.Fractional, f.Sim.InstanceBinds, f.Sim.ShareBinds, f.Sim.MaxSharesPerGPU,
			f.MIGDecided, f.Sim.MIGApplied, f.Sim.MIGRefused, f.Sim.InstancesCreated, f.Sim.InstancesDestroyed), "  ", helpWidth))
	}
	utilDef := "util: GPU-seconds busy / available"
	if fractional {
		utilDef = "util: GPU-milli-seconds held / available (a share by its milli, a MIG instance by its compute fraction)"
	}
	b.WriteString("\n" + wrap(utilDef+" from first submit to last end (it ties when the last arrivals set the makespan);"+
		" bsld: mean bounded slowdown (10 s); frag: mean free GPUs no pending job could use;"+
		" max gang: mean largest placeable gang (GPUs); durations in h:mm:ss, or in days and hours (3d04h)"+
		" in a column that reaches two days.", "", helpWidth))
	fmt.Fprintf(&b, "%d replays in %s.\n", len(rows), elapsed.Round(10*time.Millisecond))
	_, err := io.WriteString(w, b.String())
	return err
}

// durCol is one duration column of the table: every value in it is
// printed in the same format, days and hours ("3d04h") when any value is
// two days or more, else hours, minutes and seconds ("1:02:03").
type durCol struct{ max time.Duration }

func (c *durCol) see(d time.Duration) { c.max = max(c.max, d) }

func (c *durCol) format(d time.Duration) string {
	if c.max >= 48*time.Hour {
		h := (d + 30*time.Minute) / time.Hour
		return fmt.Sprintf("%dd%02dh", h/24, h%24)
	}
	sec := (d + time.Second/2) / time.Second
	return fmt.Sprintf("%d:%02d:%02d", sec/3600, sec/60%60, sec%60)
}

func seedsString(seeds []int64, used bool) string {
	if !used {
		return strconv.FormatInt(seeds[0], 10) + " (no effect: exact trace replay)"
	}
	if len(seeds) == 1 {
		return strconv.FormatInt(seeds[0], 10)
	}
	contiguous := true
	for i := 1; i < len(seeds); i++ {
		if seeds[i] != seeds[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous {
		return fmt.Sprintf("%d-%d (means over %d)", seeds[0], seeds[len(seeds)-1], len(seeds))
	}
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatInt(s, 10)
	}
	return strings.Join(parts, ",") + fmt.Sprintf(" (means over %d)", len(seeds))
}

// describeTopo summarizes a workload's own cluster: nodes, GPUs, MIG and
// shared GPUs.
func describeTopo(l *loaded) string {
	nodes, gpus, migGPUs := len(l.topo.Nodes), 0, 0
	for i := range l.topo.Nodes {
		n := &l.topo.Nodes[i]
		gpus += n.GPUs
		if n.MIG {
			migGPUs += n.GPUs
		}
	}
	s := fmt.Sprintf("%d nodes (%d GPUs", nodes, gpus)
	if migGPUs > 0 {
		s += fmt.Sprintf(", %d in MIG mode", migGPUs)
	}
	if l.topo.ShareFreeGPUs {
		s += ", shared on demand"
	}
	return s + ")"
}

// reasons is the row's dropped jobs by reason (never nil).
func (r *row) reasons() map[string]int {
	if r.droppedBy == nil {
		return map[string]int{}
	}
	return r.droppedBy
}

// reasonText writes the reasons as "N reason" joined by sep, most first.
func (r *row) reasonText(sep string) string {
	by := r.reasons()
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(by[b], by[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", by[k], k)
	}
	return strings.Join(parts, sep)
}

// writeIndentedJSON writes v as JSON indented by two spaces, with a final
// newline: the experiments' --format json.
func writeIndentedJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
