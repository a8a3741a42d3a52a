package slurm

import (
	"os"
	"time"
)

// The end log (Config.EndLog): a file slurmctld appends to as each job
// ends, such as jobcomp/filetxt's JobCompLoc (slurmctld writes the line in
// its own process, the job still COMPLETING: it costs SLURM nothing
// measurable, where jobcomp/script, which forks a script per job, cut
// SLURM's own throughput on the test cluster from 18 to 3 jobs/s).
//
// Next looks at the file's size every endLogCheck; when it grew, the next
// poll starts at once (after the one in flight, which may have read squeue
// before the end), instead of PollInterval after the last: berth learns a
// job's end one poll after it, not a poll plus up to PollInterval plus the
// rest of a poll in flight. The lines are not read: jobcomp/filetxt writes
// the job's name as its user gave it, so a name holding a newline forges a
// line ("JobId=7 ... JobState=COMPLETED") that no check can tell from
// slurmctld's. A user who ends jobs on purpose can only make berth poll
// more often (one poll at a time, back to back at worst).

// endLogCheck is how often Next looks at the end log's size.
const endLogCheck = 10 * time.Millisecond

// endLog is the reader's state; Next's goroutine only.
type endLog struct {
	started bool
	size    int64
}

// endLogGrew reports whether Config.EndLog changed size since the last
// look (the first look takes its size). A file that cannot be read is
// taken as unchanged: the polls go on at PollInterval.
func (b *Backend) endLogGrew() bool {
	if b.cfg.EndLog == "" {
		return false
	}
	fi, err := os.Stat(b.cfg.EndLog)
	if err != nil {
		return false
	}
	e := &b.ends
	grew := e.started && fi.Size() != e.size
	e.started, e.size = true, fi.Size()
	return grew
}
