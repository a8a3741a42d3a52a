package slurm

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// How the poller reads jobs. `squeue --json` costs about 0.5 s with a few
// hundred jobs (22.05's JSON ignores -p, -t and -j, so it prints every job
// the controller keeps, for MinJobAge after its end too); the same jobs in a
// fixed text format cost what starting squeue costs (~0.1 s). So each poll
// reads, in one squeue, only fields no user can write (listField), filtered
// to the managed and run partitions; the fields users write (account,
// comment, constraint) are read once, for the jobs berth has not seen yet
// (detailFields, comment last); the GPU indices of a job once, from the
// second poll that sees it running (scontrol -d show job, read as lines of
// its own). Every read is checked so that text a
// user wrote (a job name or comment with the separator or a newline) cannot
// pass for another job's fields: what fails a check is read again from
// squeue --json, slow but unambiguous.

// sep separates the fields of squeue -O (each field ":0" wide: no padding,
// no truncation, sep as its suffix).
const sep = "|"

// listFields are the fields of every poll: none holds user text.
var listFields = []string{"JobArrayID", "State", "Partition", "NumNodes", "RestartCnt", "Reason", "NodeList", "SubmitTime", "StartTime", "ReqNodes"}

// detailFields are read for jobs berth has not seen: the user's text
// (account, comment) last, the comment the very last. The constraint
// (Feature: "a100|h100" holds sep) ends with featSep instead of sep.
var detailFields = []string{"JobArrayID", "TimeLimit", "tres-per-node", "tres-per-job", "Feature", "Account", "Comment"}

// featSep ends the Feature field of detailFields: a control character no
// feature name holds (slurmctld accepts only constraints over the nodes'
// features, which are the site's).
const featSep = "\x1f"

// featureAt is Feature's index in detailFields.
const featureAt = 4

// detailArg is squeue's -O argument for detailFields.
func detailArg() string {
	return strings.Replace(formatArg(detailFields), "Feature:0"+sep, "Feature:0"+featSep, 1)
}

// formatArg is squeue's -O argument for fields.
func formatArg(fields []string) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f + ":0" + sep
		if i == len(fields)-1 {
			parts[i] = f + ":0"
		}
	}
	return strings.Join(parts, ",")
}

// timeEnv makes squeue print times as Unix seconds.
var timeEnv = []string{"SLURM_TIME_FORMAT=%s"}

// arrayIDRE is a JobArrayID: 12, 12_3, or a pending array's 12_[0-15%4].
var arrayIDRE = regexp.MustCompile(`^([0-9]{1,12})(?:_([0-9]{1,9}|\[[0-9,:%-]{1,200}\]))?$`)

// parseList reads the poll's squeue -h -O listFields output. A line with
// another field count is an error (no field of the list holds user text,
// so it cannot happen but by a change of squeue's format).
func parseList(out []byte) ([]jobRec, error) {
	var recs []jobRec
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, sep)
		if len(f) != len(listFields) {
			return nil, fmt.Errorf("%w: squeue line %q: %d fields, want %d", ErrParse, line, len(f), len(listFields))
		}
		var r jobRec
		if err := setID(&r, f[0]); err != nil {
			return nil, err
		}
		r.State, r.Partition = strings.TrimSpace(f[1]), strings.TrimSpace(f[2])
		var err error
		if r.NodeCount, err = atoi(f[3]); err != nil {
			return nil, fmt.Errorf("%w: squeue line %q: node count", ErrParse, line)
		}
		if r.RestartCnt, err = atoi(f[4]); err != nil {
			return nil, fmt.Errorf("%w: squeue line %q: restart count", ErrParse, line)
		}
		r.StateReason, r.Nodes = strings.TrimSpace(f[5]), strings.TrimSpace(f[6])
		sub, err1 := atoi64(f[7])
		st, err2 := atoi64(f[8])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: squeue line %q: times (SLURM_TIME_FORMAT=%%s)", ErrParse, line)
		}
		r.SubmitTime, r.StartTime = sub, st
		r.ReqNodes = nullable(f[9])
		recs = append(recs, r)
	}
	return recs, nil
}

// setID reads a JobArrayID into r.
func setID(r *jobRec, s string) error {
	s = strings.TrimSpace(s)
	m := arrayIDRE.FindStringSubmatch(s)
	if m == nil {
		return fmt.Errorf("%w: job ID %q", ErrParse, s)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	r.JobID = id
	switch {
	case m[2] == "":
	case strings.HasPrefix(m[2], "["):
		r.ArrayTaskString = strings.Trim(m[2], "[]")
	default:
		t, _ := strconv.ParseInt(m[2], 10, 64)
		r.ArrayJobID, r.ArrayTaskID = id, &t
	}
	return nil
}

func atoi(s string) (int, error) {
	n, err := atoi64(s)
	return int(n), err
}

// atoi64 reads a number; N/A, (null) and empty are 0.
func atoi64(s string) (int64, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "N/A", "(null)", "Unknown", "None":
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// parseDetail reads squeue -h -O detailFields for the jobs want (by
// recID) into recs. A record begins on a line "ID|" of a wanted job; any
// other line continues the comment above it (a comment may hold newlines).
// It reports false, and fills nothing, when a wanted job has no record or
// more than one (a comment that forges a record): the caller reads them
// from squeue --json instead.
func parseDetail(out []byte, want map[string]*jobRec) bool {
	type det struct{ f []string }
	got := map[string]*det{}
	var cur *det
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		id, _, _ := strings.Cut(line, sep)
		if _, ok := want[strings.TrimSpace(id)]; ok {
			if got[strings.TrimSpace(id)] != nil {
				return false // two records for one job: one is forged
			}
			head, tail, ok := strings.Cut(line, featSep)
			f := strings.SplitN(head, sep, featureAt+1)
			f = append(f, strings.SplitN(tail, sep, len(detailFields)-featureAt-1)...)
			if !ok || len(f) != len(detailFields) {
				return false
			}
			cur = &det{f: f}
			got[strings.TrimSpace(id)] = cur
			continue
		}
		if cur == nil {
			if strings.TrimSpace(line) == "" {
				continue
			}
			return false
		}
		cur.f[len(cur.f)-1] += "\n" + line
	}
	if len(got) != len(want) {
		return false
	}
	for id, d := range got {
		r := want[id]
		lim, ok := parseTimeLimit(d.f[1])
		if !ok {
			return false
		}
		r.TimeLimit = lim
		r.TresPerNode, r.TresPerJob = nullable(d.f[2]), nullable(d.f[3])
		r.Features = nullable(d.f[featureAt])
		r.Account, r.Comment = nullable(d.f[5]), nullable(d.f[6])
		r.detail = true
	}
	return true
}

func nullable(s string) string {
	s = strings.TrimSpace(s)
	if s == "(null)" || s == "N/A" {
		return ""
	}
	return s
}

// parseTimeLimit reads squeue's time limit ("1:00", "2:00:00",
// "1-00:00:00", "UNLIMITED") into minutes (0: none).
func parseTimeLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	switch s {
	case "UNLIMITED", "NOT_SET", "N/A", "INVALID", "Partition_Limit", "":
		return 0, true
	}
	var days int64
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return 0, false
		}
		days, s = n, rest
	}
	var parts []int64
	for _, p := range strings.Split(s, ":") {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		parts = append(parts, n)
	}
	var sec int64
	switch len(parts) {
	case 1: // minutes
		sec = parts[0] * 60
	case 2: // M:SS
		sec = parts[0]*60 + parts[1]
	case 3: // H:MM:SS
		sec = parts[0]*3600 + parts[1]*60 + parts[2]
	default:
		return 0, false
	}
	return days*24*60 + (sec+59)/60, true
}

// gresLineRE is one node of `scontrol -d show job`'s allocation detail.
var gresLineRE = regexp.MustCompile(`^\s+Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)\s*$`)

// parseDevices reads `scontrol -d show job` for the jobs of recs (in that
// order, one "JobId=" block each) into their GresDetail, in the order of
// their node lists (read by the poll, not from this output). It reports
// false, filling nothing, unless every job has one block and every node of
// its node list exactly one detail line: a job name or comment that forges
// a block or a line makes a count wrong.
func parseDevices(out []byte, recs []*jobRec) bool {
	var blocks [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "JobId=") {
			blocks = append(blocks, nil)
		}
		if len(blocks) > 0 {
			blocks[len(blocks)-1] = append(blocks[len(blocks)-1], line)
		}
	}
	if len(blocks) != len(recs) {
		return false
	}
	details := make([][]string, len(recs))
	for i, r := range recs {
		head := blocks[i][0]
		if r.ArrayTaskID != nil {
			if !strings.Contains(head, fmt.Sprintf(" ArrayJobId=%d ArrayTaskId=%d ", r.ArrayJobID, *r.ArrayTaskID)) {
				return false
			}
		} else if !strings.HasPrefix(head, fmt.Sprintf("JobId=%d ", r.JobID)) {
			return false
		}
		nodes, err := expandHostlist(r.Nodes)
		if err != nil || len(nodes) == 0 {
			return false
		}
		per := map[string]string{}
		ended := false
		for _, line := range blocks[i][1:] {
			m := gresLineRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			ns, err := expandHostlist(m[1])
			if err != nil {
				return false
			}
			for _, n := range ns {
				if _, dup := per[n]; dup || !slices.Contains(nodes, n) {
					return false
				}
				per[n] = m[2]
			}
			if !strings.Contains(m[2], "IDX:") {
				ended = true // GRES released: the job is ending
			}
		}
		if len(per) == 0 || ended {
			continue // ended meanwhile: no allocation detail (left unread)
		}
		if len(per) != len(nodes) {
			return false
		}
		for _, n := range nodes {
			details[i] = append(details[i], per[n])
		}
	}
	for i, r := range recs {
		if details[i] != nil {
			r.GresDetail, r.devs = details[i], true
		}
	}
	return true
}

// readJobs reads the jobs of the managed and run partitions for a poll:
// listFields for all, detailFields for those berth has not seen, the GPU
// indices of those that started. Whatever cannot be read safely that way
// comes from squeue --json.
func (b *Backend) readJobs(ctx context.Context) ([]jobRec, error) {
	parts := []string{b.cfg.RunPartition}
	for p := range b.cfg.Partitions {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	out, err := b.cli.runEnv(ctx, timeEnv, "", "squeue", "-h", "-r", "-t", "all", "-p", strings.Join(parts, ","), "-O", formatArg(listFields))
	if err != nil {
		return nil, err
	}
	recs, err := parseList(out)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	detail, devs, useJSON := b.needsLocked(recs)
	b.mu.Unlock()
	if useJSON {
		b.mu.Lock()
		b.stats.JSONReads++
		b.mu.Unlock()
		return b.squeue(ctx)
	}
	if len(detail) > 0 {
		want := make(map[string]*jobRec, len(detail))
		ids := make([]string, 0, len(detail))
		for _, r := range detail {
			want[recID(r)] = r
			ids = append(ids, recID(r))
		}
		out, err := b.cli.runEnv(ctx, timeEnv, "", "squeue", "-h", "-r", "-t", "all", "-j", strings.Join(ids, ","), "-O", detailArg())
		b.mu.Lock()
		b.stats.DetailReads++
		b.mu.Unlock()
		if err != nil || !parseDetail(out, want) {
			b.mu.Lock()
			b.stats.JSONReads++
			b.mu.Unlock()
			return b.squeue(ctx)
		}
	}
	if len(devs) > 0 && !b.devicesRead(devs) {
		b.mu.Lock()
		b.stats.JSONReads++
		b.mu.Unlock()
		return b.squeue(ctx)
	}
	return recs, nil
}

// needsLocked says which records the poll must read more of: detail (the
// user's fields: jobs berth has not seen, and jobs it runs that are
// pending again, which are submitted again), devs (the GPU indices of
// jobs that started), or everything from JSON (a job in the run partition
// berth does not know, whose admin comment and replica tag are needed).
// b.mu is held.
func (b *Backend) needsLocked(recs []jobRec) (detail, devs []*jobRec, useJSON bool) {
	for i := range recs {
		r := &recs[i]
		if rid, ok := b.replicaRec(r); ok {
			if rp := b.svcs().reps[rid]; rp != nil && r.State == "RUNNING" && rp.devices == "" {
				devs = append(devs, r)
			}
			continue
		}
		if arrayMeta(r) {
			if r.State == "PENDING" {
				detail = append(detail, r)
			}
			continue
		}
		id := b.berthIDLocked(recID(r))
		t := b.jobs[id]
		_, managed := b.cfg.Partitions[r.Partition]
		switch {
		case t == nil && terminal(r.State):
		case t == nil && !managed:
			return nil, nil, true
		case t == nil:
			if b.held[id] && r.State == "PENDING" && !heldReason(r.StateReason) {
				// Held by berth as never runnable, released by its
				// user (fixed, perhaps): read it again.
				delete(b.held, id)
				delete(b.skipped, id)
			}
			if !b.skipped[id] && r.State == "PENDING" {
				detail = append(detail, r)
			}
		case t.state == inRunning && r.State == "PENDING" && !t.preempted && b.handBack(t, r):
			detail = append(detail, r)
		case t.state == inRunning && r.State == "RUNNING" && (t.devices == "" || r.RestartCnt != t.restarts):
			// Read from the second poll that sees it running: most short
			// jobs have ended by then, and each read is two RPCs that
			// slurmctld serves under its job lock (`scontrol show job`
			// asks the federation first), as many as the bind itself. A
			// job's GPUs are SLURM's choice either way; the indices only
			// correct berth's books, one poll later.
			if t.seenRun != r.RestartCnt+1 {
				t.seenRun = r.RestartCnt + 1
				continue
			}
			devs = append(devs, r)
		}
	}
	return detail, devs, false
}

// deviceReaders is how many scontrol processes read GPU indices at once
// (show job takes the controller's job read lock: they run in parallel).
const deviceReaders = 4

// readDevices reads the GPU indices of recs with `scontrol -d show job`,
// in up to deviceReaders processes. It reports false when an output fails
// parseDevices' checks. A failed command (a job purged meanwhile) leaves
// its jobs unread: the next poll reads them.
func (b *Backend) readDevices(ctx context.Context, recs []*jobRec) bool {
	chunk := (len(recs) + deviceReaders - 1) / deviceReaders
	var wg sync.WaitGroup
	var bad atomic.Bool
	for lo := 0; lo < len(recs); lo += chunk {
		part := recs[lo:min(lo+chunk, len(recs))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var in strings.Builder
			for _, r := range part {
				in.WriteString("show job " + recID(r) + "\n")
			}
			// --local: no federation lookup (REQUEST_FED_INFO) before
			// each show job, half the RPCs of a read.
			out, err := b.cli.runInput(ctx, in.String(), "scontrol", "--local", "-d")
			if err == nil && !parseDevices(out, part) {
				bad.Store(true)
			}
		}()
	}
	wg.Wait()
	b.mu.Lock()
	b.stats.DeviceReads++
	b.mu.Unlock()
	return !bad.Load()
}

func heldReason(reason string) bool { return reason == "JobHeldUser" || reason == "JobHeldAdmin" }

// devRead is the GPU indices read for a started job, until a poll takes
// them.
type devRead struct {
	nodes    string // the node list they were read for
	restarts int
	detail   []string
}

// devicesRead fills the GPU indices of recs that a background read
// (readDevicesAsync) found, and starts one for the others: the indices of
// a job that started are reported one poll later, and a poll never waits
// for scontrol (a few ms a job, some seconds when a hundred jobs start at
// once). It reports false when a background read failed its checks: the
// caller reads JSON.
func (b *Backend) devicesRead(recs []*jobRec) bool {
	b.mu.Lock()
	if b.devJSON {
		b.devJSON = false
		b.mu.Unlock()
		return false
	}
	var missing []*jobRec
	for _, r := range recs {
		id := recID(r)
		if e, ok := b.devRead[id]; ok && e.nodes == r.Nodes && e.restarts == r.RestartCnt {
			r.GresDetail, r.devs = e.detail, true
			delete(b.devRead, id)
			continue
		}
		c := *r // (the read fills its own copy)
		missing = append(missing, &c)
	}
	start := !b.devReading && len(missing) > 0 && !b.closed
	if start {
		b.devReading = true
	}
	b.mu.Unlock()
	if start {
		go b.readDevicesAsync(missing)
	}
	return true
}

// readDevicesAsync reads the GPU indices of recs for the next poll.
func (b *Backend) readDevicesAsync(recs []*jobRec) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.CommandTimeout)
	defer cancel()
	ok := b.readDevices(ctx, recs)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.devReading = false
	if !ok {
		b.devJSON = true
		return
	}
	for _, r := range recs {
		if r.devs {
			b.devRead[recID(r)] = devRead{nodes: r.Nodes, restarts: r.RestartCnt, detail: r.GresDetail}
		}
	}
}
