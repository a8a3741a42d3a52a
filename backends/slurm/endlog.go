package slurm

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/engine"
)

// The end log (Config.EndLog): a file slurmctld appends to as each job
// ends, such as jobcomp/filetxt's JobCompLoc (slurmctld writes the line in
// its own process, the job still COMPLETING: it costs SLURM nothing
// measurable, where jobcomp/script, which forks a script per job, cut
// SLURM's own throughput on the test cluster from 18 to 3 jobs/s).
//
// Its lines are hints, never facts: jobcomp/filetxt writes the job's name
// as its user gave it, so a name holding a newline forges a line
// ("JobId=7 ... JobState=COMPLETED") that no check can tell from
// slurmctld's. Next reads what was appended every endLogCheck and takes
// from each line only the job ID it begins with. When every ID names a
// job berth runs, the IDs are confirmed (confirmEnds): a long-lived
// scontrol reads those jobs only, one REQUEST_JOB_INFO_SINGLE each, checked so
// that user text cannot pass for a field (parseShowJobs); a job is
// reported ended only from slurmctld's answer (state, restart count, exit
// code). Anything else (a line of a job berth does not run, an answer
// that does not show the job ended, a failed read) starts a full poll at
// once (after the one in flight, which may have read squeue before the
// end), as the log's growth alone did before: a forged line costs one
// read, or one poll, and frees nothing.

// endLogCheck is how often Next looks at the end log.
const endLogCheck = 10 * time.Millisecond

// maxEndRead bounds what one look reads of the end log; maxEndPart the
// unfinished last line kept for the next look. More is taken as growth
// of unknown content: a full poll.
const (
	maxEndRead = 1 << 20
	maxEndPart = 1 << 16
)

// endLineRE is the start of a jobcomp/filetxt line: the job's ID.
var endLineRE = regexp.MustCompile(`^JobId=([0-9]{1,12}) `)

// endLog is the reader's state; Next's goroutine only.
type endLog struct {
	started bool
	off     int64  // bytes of the file read
	part    []byte // the last line read, unfinished
}

// readEndLog reads what Config.EndLog gained since the last look (the
// first look takes its size): grew reports that it changed, ids the job
// IDs its new whole lines begin with (hints), known whether every new
// line named one (false: poll). A file that cannot be read is taken as
// unchanged: the polls go on at PollInterval.
func (b *Backend) readEndLog() (grew bool, ids []string, known bool) {
	if b.cfg.EndLog == "" {
		return false, nil, false
	}
	e := &b.ends
	f, err := os.Open(b.cfg.EndLog)
	if err != nil {
		return false, nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, nil, false
	}
	size := fi.Size()
	if !e.started || size < e.off {
		// First look, or the log was truncated or rotated: from its end.
		grew = e.started
		e.started, e.off, e.part = true, size, nil
		return grew, nil, false
	}
	if size == e.off {
		return false, nil, false
	}
	if size-e.off > maxEndRead {
		e.off, e.part = size, nil
		return true, nil, false
	}
	buf := make([]byte, size-e.off)
	if _, err := io.ReadFull(io.NewSectionReader(f, e.off, size-e.off), buf); err != nil {
		e.off, e.part = size, nil
		return true, nil, false
	}
	e.off = size
	text := string(e.part) + string(buf)
	lines := strings.Split(text, "\n")
	last := lines[len(lines)-1]
	e.part = nil
	known = true
	if len(last) > maxEndPart {
		known = false
	} else if last != "" {
		e.part = []byte(last)
	}
	for _, line := range lines[:len(lines)-1] {
		m := endLineRE.FindStringSubmatch(line)
		if m == nil {
			known = false
			continue
		}
		if !slices.Contains(ids, m[1]) {
			ids = append(ids, m[1])
		}
	}
	return true, ids, known
}

// endAnswer is what a confirmation read of one job.
type endAnswer struct {
	state    string
	restarts int
	exit     string
}

// showTokens are the fields of `scontrol -o show job` a confirmation
// reads; none is user text.
var showTokens = []string{"JobState", "Restarts", "ExitCode"}

// parseShowJobs reads `scontrol --local -o show job` of ids, one command
// a line on its standard input (scontrol echoes each, "scontrol: show job
// 7", on lines of their own). The records hold text users wrote (the job
// name, the comment, the paths), so the read is checked the way
// parseDevices is: a record begins on a line "JobId=<id> "; there must be
// exactly one for each of ids, in order, and in each record each field of
// showTokens exactly once as a word of its own (" JobState=" or at the
// start of a line). Forged text can only add lines and words: a forged
// record or field makes a count wrong, and the whole read fails (the
// caller polls). A genuine field is never lost, so a value read is
// slurmctld's.
func parseShowJobs(out []byte, ids []string) (map[string]endAnswer, bool) {
	var recs [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "JobId=") {
			recs = append(recs, nil)
		}
		if len(recs) > 0 {
			recs[len(recs)-1] = append(recs[len(recs)-1], line)
		} else if fieldCount(line, showTokens[0]) > 0 {
			return nil, false
		}
	}
	if len(recs) != len(ids) {
		return nil, false
	}
	res := map[string]endAnswer{}
	for i, rec := range recs {
		if !strings.HasPrefix(rec[0], "JobId="+ids[i]+" ") {
			return nil, false
		}
		if _, dup := res[ids[i]]; dup {
			return nil, false
		}
		text := strings.Join(rec, "\n")
		var v [3]string
		for k, tok := range showTokens {
			if fieldCount(text, tok) != 1 {
				return nil, false
			}
			v[k] = fieldValue(text, tok)
		}
		n, err := atoi(v[1])
		if err != nil || v[0] == "" {
			return nil, false
		}
		res[ids[i]] = endAnswer{state: v[0], restarts: n, exit: v[2]}
	}
	return res, true
}

// fieldCount counts "tok=" in text as a word of its own: after a space,
// a newline or at the start.
func fieldCount(text, tok string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, tok+"=") {
			n++
		}
		n += strings.Count(line, " "+tok+"=")
	}
	return n
}

// fieldValue is the value of the one "tok=" of text (fieldCount 1): up
// to the next space or the line's end.
func fieldValue(text, tok string) string {
	for _, line := range strings.Split(text, "\n") {
		i := -1
		if strings.HasPrefix(line, tok+"=") {
			i = 0
		} else if j := strings.Index(line, " "+tok+"="); j >= 0 {
			i = j + 1
		}
		if i >= 0 {
			v := line[i+len(tok)+1:]
			if sp := strings.IndexByte(v, ' '); sp >= 0 {
				v = v[:sp]
			}
			return v
		}
	}
	return ""
}

// endsToConfirm returns the SLURM IDs of ids that are jobs berth runs
// or binds (Finished or Cancelled would be news), and whether every ID is
// such a job or one the engine already knows ended: any other (a job
// berth does not know, a pending one, an array task, a job berth is
// stopping) needs a full poll. b.mu is held.
func (b *Backend) endsToConfirmLocked(ids []string) (want []string, all bool) {
	all = true
	for _, sid := range ids {
		t := b.jobs[b.berthIDLocked(sid)]
		switch {
		case t == nil:
			all = false
		case t.state == inEnded:
		case t.binding && t.state == inPending:
			// Its bind is in flight (an early line of a batch can start
			// and end before scontrol returns): confirmed once the bind
			// answered (confirmEnds keeps it in bindWait).
			want = append(want, sid)
		case t.state != inRunning || t.preempted || t.binding || t.misplaced:
			all = false
		default:
			want = append(want, sid)
		}
	}
	return want, all
}

// confirmEnds reads the jobs of sids (SLURM IDs of jobs berth runs) with
// scontrol (showJobs, parseShowJobs) and reports those that ended: Finished, or Cancelled for a
// job SLURM shows CANCELLED. It reports whether a full poll is needed:
// some job not shown ended (a forged line, a job still running), or the
// read failed.
//
// A job is taken as ended when its state is terminal (Cancelled for
// CANCELLED, else Finished, as a poll does) with the restart count of the
// run berth started. slurmctld writes the end log before the epilog, the
// job still COMPLETING, whose state does not yet tell a completion from a
// cancel (scancel leaves ExitCode=0:0 until the batch step reports): such
// a job is read again every completingRetry, completingTries times, then
// left to a poll.
func (b *Backend) confirmEnds(ctx context.Context, sids []string) (poll bool) {
	start := time.Now()
	// One REQUEST_JOB_INFO_SINGLE a job (--local: no federation lookup),
	// on the long-lived scontrol (showproc.go), where a squeue of several
	// jobs packs every job slurmctld keeps.
	out, err := b.showJobs(ctx, sids)
	var ans map[string]endAnswer
	ok := err == nil
	if ok {
		ans, ok = parseShowJobs(out, sids)
	}
	now := time.Now()
	var evs []engine.Event
	b.mu.Lock()
	b.stats.Confirms++
	b.stats.ConfirmTime += now.Sub(start)
	if !ok {
		b.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("%w: scontrol show job of %v: a record failed its checks", ErrParse, sids)
		}
		b.skip("", fmt.Errorf("confirming job ends (polling instead): %w", err))
		return true
	}
	for _, sid := range sids {
		id := b.berthIDLocked(sid)
		t := b.jobs[id]
		if t == nil || t.state == inEnded {
			delete(b.completing, sid)
			continue // (a poll reported it meanwhile)
		}
		if t.binding {
			b.bindWait = append(b.bindWait, sid) // confirmed again after its bind
			continue
		}
		a, shown := ans[sid]
		if !shown || t.state != inRunning || t.preempted || t.misplaced || a.restarts != t.restarts || t.actedAt.After(start) {
			// (bound since the read: the answer is of the run before)
			delete(b.completing, sid)
			poll = true
			continue
		}
		switch {
		case a.state == "CANCELLED":
			t.state = inEnded
			delete(b.completing, sid)
			evs = append(evs, engine.Cancelled(now, id))
		case terminal(a.state):
			t.state = inEnded
			delete(b.completing, sid)
			evs = append(evs, engine.Finished(now, id))
		case a.state == "COMPLETING" && b.completing[sid] < completingTries:
			// Ending (slurmctld writes the end log before the epilog):
			// read again shortly, for the state it ends in.
			b.completing[sid]++
			b.completingAt = now.Add(completingRetry)
		default:
			delete(b.completing, sid)
			poll = true
		}
	}
	b.stats.Confirmed += len(evs)
	b.queued = append(b.queued, evs...)
	b.mu.Unlock()
	return poll
}

// completingRetry and completingTries: how often and how many times a
// job seen COMPLETING is read again before a poll decides.
const (
	completingRetry = 50 * time.Millisecond
	completingTries = 20
)
