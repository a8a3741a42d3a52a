package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthsched/berth/accounting"
	"github.com/berthsched/berth/backends"
)

const accountExamples = `  berth account --db acct.db --by account
  berth account --db acct.db --by user --since 2026-01-01 --until 2026-02-01 --format csv
  berth account --db 'postgres://berth@db:5432/berth' --by partition --format json
`

const auditExamples = `  berth audit --db acct.db j0042
  berth audit --db 'postgres://berth@db:5432/berth' --format json j0042 j0043
`

// dbFlagHelp is the --db flag's help.
const dbFlagHelp = "the accounting database: a SQLite file, or a postgres:// URL"

// openAccounting opens --db for reading: a SQLite file must exist.
func openAccounting(ctx context.Context, dsn string) (*accounting.DB, error) {
	if dsn == "" {
		return nil, usagef("--db is required (%s)", dbFlagHelp)
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--db %s: %w", dsn, err)
		}
	}
	return accounting.Open(ctx, dsn)
}

// parseWhen reads --since / --until: RFC 3339, or a UTC date or date and
// time ("2026-01-02", "2026-01-02T15:04", "2026-01-02 15:04:05").
func parseWhen(flagName, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("--%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or a UTC date (2026-01-02, 2026-01-02T15:04)", flagName, s)
}

func cmdAccount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("berth account", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", dbFlagHelp)
	by := fs.String("by", "account", "group GPU-hours by: "+strings.Join(accounting.UsageKeys(), ", "))
	since := fs.String("since", "", "count usage from this time on (RFC 3339, or a UTC date); runs are clipped to the period")
	until := fs.String("until", "", "count usage before this time")
	format := fs.String("format", "table", "output: table, csv or json (rows carry the --by key and gpu_hours)")
	fs.Usage = usageFunc(fs, stderr, "berth account --db FILE-or-URL --by KEY [--since T --until T] [--format F]", accountExamples)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if !isUsageKey(*by) {
		return usagef("--by %q: want one of %s", *by, strings.Join(accounting.UsageKeys(), ", "))
	}
	f, err := parseFormat(*format)
	if err != nil {
		return err
	}
	q := accounting.UsageQuery{By: *by}
	if q.Since, err = parseWhen("since", *since); err != nil {
		return err
	}
	if q.Until, err = parseWhen("until", *until); err != nil {
		return err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return usagef("--until %s is before --since %s", *until, *since)
	}
	adb, err := openAccounting(ctx, *db)
	if err != nil {
		return err
	}
	defer adb.Close()
	rows, err := adb.Usage(ctx, q)
	if err != nil {
		return err
	}
	return writeUsage(stdout, f, *by, rows)
}

func isUsageKey(k string) bool {
	for _, u := range accounting.UsageKeys() {
		if u == k {
			return true
		}
	}
	return false
}

func gpuHours(h float64) string { return strconv.FormatFloat(h, 'f', 3, 64) }

func writeUsage(w io.Writer, format, by string, rows []accounting.UsageRow) error {
	switch format {
	case "json":
		out := make([]map[string]any, len(rows))
		for i, r := range rows {
			out[i] = map[string]any{by: r.Key, "gpu_hours": r.GPUHours, "jobs": r.Jobs, "runs": r.Runs}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{by, "gpu_hours", "jobs", "runs"})
		for _, r := range rows {
			_ = cw.Write([]string{r.Key, strconv.FormatFloat(r.GPUHours, 'f', -1, 64), strconv.Itoa(r.Jobs), strconv.Itoa(r.Runs)})
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tGPU-hours\tjobs\truns\t\n", strings.ToUpper(by))
	var total float64
	for _, r := range rows {
		key := r.Key
		if key == "" {
			key = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t\n", key, gpuHours(r.GPUHours), r.Jobs, r.Runs)
		total += r.GPUHours
	}
	fmt.Fprintf(tw, "total\t%s\t\t\t\n", gpuHours(total))
	return tw.Flush()
}

func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("berth audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", dbFlagHelp)
	format := fs.String("format", "table", "output: table or json")
	fs.Usage = usageFunc(fs, stderr, "berth audit --db FILE-or-URL [--format F] JOB...", auditExamples)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() == 0 {
		return usagef("name at least one job ID")
	}
	if *format != "table" && *format != "json" {
		return usagef("--format %q: want table or json", *format)
	}
	adb, err := openAccounting(ctx, *db)
	if err != nil {
		return err
	}
	defer adb.Close()
	var audits []accounting.Audit
	for _, id := range fs.Args() {
		a, err := adb.Audit(ctx, id)
		if err != nil {
			return err
		}
		audits = append(audits, a)
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(auditJSON(audits))
	}
	for i, a := range audits {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := writeAudit(stdout, &a); err != nil {
			return err
		}
	}
	return nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeAudit(w io.Writer, a *accounting.Audit) error {
	fmt.Fprintf(w, "job %s: %s; queue %s, account %s, user %s, partition %s\n", a.Job, a.State, orDash(a.Queue),
		orDash(a.Account), orDash(a.User), orDash(a.Partition))
	fmt.Fprintf(w, "submitted %s, first start %s, end %s; %d runs, %d preemptions, %d requeues, %s GPU-hours\n",
		stamp(a.Submit), stamp(a.Start), stamp(a.End), a.Runs, a.Preemptions, a.Requeues, gpuHours(float64(a.GPUMicroseconds)/3.6e9))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSTEP\tGPUS (node:index=uuid)\tDRIVER\tIMAGE\tGPU-HOURS\tREASON")
	for _, s := range a.Steps {
		h := ""
		if s.GPUMicroseconds > 0 {
			h = gpuHours(float64(s.GPUMicroseconds) / 3.6e9)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(s.Time), s.Kind, orDash(s.GPUs), orDash(s.Driver), orDash(s.Image),
			orDash(h), s.Reason)
	}
	return tw.Flush()
}

type auditStepJSON struct {
	Time      time.Time `json:"time"`
	Step      string    `json:"step"`
	Reason    string    `json:"reason,omitempty"`
	Partition string    `json:"partition,omitempty"`
	Nodes     []string  `json:"nodes,omitempty"`
	GPUs      string    `json:"gpus,omitempty"`
	Driver    string    `json:"driver,omitempty"`
	Image     string    `json:"image,omitempty"`
	RunStart  time.Time `json:"run_start,omitzero"`
	GPUHours  float64   `json:"gpu_hours,omitempty"`
}

type auditJobJSON struct {
	Job         string          `json:"job"`
	State       string          `json:"state"`
	Queue       string          `json:"queue"`
	Account     string          `json:"account"`
	User        string          `json:"user"`
	Partition   string          `json:"partition"`
	Submit      time.Time       `json:"submit,omitzero"`
	Start       time.Time       `json:"start,omitzero"`
	End         time.Time       `json:"end,omitzero"`
	Runs        int             `json:"runs"`
	Preemptions int             `json:"preemptions"`
	Requeues    int             `json:"requeues"`
	GPUHours    float64         `json:"gpu_hours"`
	Steps       []auditStepJSON `json:"steps"`
}

func auditJSON(as []accounting.Audit) []auditJobJSON {
	out := make([]auditJobJSON, len(as))
	for i, a := range as {
		j := auditJobJSON{Job: a.Job, State: a.State, Queue: a.Queue, Account: a.Account, User: a.User, Partition: a.Partition,
			Submit: a.Submit, Start: a.Start, End: a.End, Runs: a.Runs, Preemptions: a.Preemptions, Requeues: a.Requeues,
			GPUHours: float64(a.GPUMicroseconds) / 3.6e9, Steps: []auditStepJSON{}}
		for _, s := range a.Steps {
			st := auditStepJSON{Time: s.Time, Step: s.Kind.String(), Reason: s.Reason, Partition: s.Partition, GPUs: s.GPUs,
				Driver: s.Driver, Image: s.Image, RunStart: s.RunStart, GPUHours: float64(s.GPUMicroseconds) / 3.6e9}
			if s.Nodes != "" {
				st.Nodes = strings.Split(s.Nodes, ",")
			}
			j.Steps = append(j.Steps, st)
		}
		out[i] = j
	}
	return out
}

// accountingSink collects a replay's records in memory (a replay runs
// far faster than a database writes, and must lose none) and writes them
// into a new SQLite file when the replay is over.
type accountingSink struct {
	path string
	recs []backends.JobRecord
}

func newAccountingSink(path string) (*accountingSink, error) {
	if _, err := os.Stat(path); err == nil {
		return nil, usagef("--accounting %s: the file exists (name a new file)", path)
	}
	// Fail now, not after the whole replay ran.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, usagef("--accounting %s: %v", path, err)
	}
	f.Close()
	return &accountingSink{path: path}, nil
}

func (s *accountingSink) Record(r backends.JobRecord) { s.recs = append(s.recs, r) }

// write stores the records and returns how many.
func (s *accountingSink) write(ctx context.Context) (int, error) {
	db, err := accounting.Open(ctx, s.path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	for i := 0; i < len(s.recs); i += 5000 {
		if err := db.Insert(ctx, s.recs[i:min(i+5000, len(s.recs))]); err != nil {
			return i, err
		}
	}
	return len(s.recs), nil
}
