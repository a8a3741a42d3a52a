package sim

import (
	"hash/maphash"
	"math"
	"sort"
	"time"
)

// The finished jobs' outcomes and IDs, kept without pointers: a month's
// replay holds millions of them for its whole length, and the garbage
// collector scans none of it (a chunk of outRecs, the ID bytes and the
// hash set of finished IDs are pointer-free memory). An unfinished job's
// outcome lives in its record (job.outv) until it finishes.

// outChunk is the number of outcome records in one chunk of Sim.outs.
const outChunk = 4096

// idChunk is the size of one chunk of Sim.ids, the bytes of the IDs.
const idChunk = 1 << 16

// noTime stands for the zero time.Time in an outRec.
const noTime = math.MinInt64

// outRec is one submitted job's outcome without pointers: times as offsets
// from Sim.base, the ID as a place in Sim.ids. closed: the record holds
// the outcome (the job finished); until then the job's record does. full:
// the outcome did not fit (a time that base.Add does not give back
// exactly, a count beyond int32) and is in Sim.full instead.
type outRec struct {
	submit, start, end int64 // offsets from Sim.base; noTime: the zero time
	lostRun, milli     int64
	gpus               int32
	preemptions        int32
	interrupted        int32
	idChunk, idOff     uint32
	idLen              uint32
	started, finished  bool
	closed, full       bool
}

// recAt is the record of the i-th job submitted.
func (s *Sim) recAt(i int) *outRec { return &s.outs[i/outChunk][i%outChunk] }

// addID stores id's bytes and returns where.
func (s *Sim) addID(id string) (chunk, off uint32) {
	n := len(s.ids)
	if n == 0 || cap(s.ids[n-1])-len(s.ids[n-1]) < len(id) {
		s.ids = append(s.ids, make([]byte, 0, max(idChunk, len(id))))
		n++
	}
	c := &s.ids[n-1]
	off = uint32(len(*c))
	*c = append(*c, id...)
	return uint32(n - 1), off
}

// idBytes are the bytes of the ID of r.
func (s *Sim) idBytes(r *outRec) []byte {
	return s.ids[r.idChunk][r.idOff : r.idOff+r.idLen]
}

// packTime is t as an offset from base, false when that does not give t
// back exactly (another location, a monotonic reading, out of range).
func (s *Sim) packTime(t time.Time) (int64, bool) {
	if t == (time.Time{}) {
		return noTime, true
	}
	d := t.Sub(s.base)
	if int64(d) == noTime || s.base.Add(d) != t {
		return 0, false
	}
	return int64(d), true
}

func (s *Sim) unpackTime(d int64) time.Time {
	if d == noTime {
		return time.Time{}
	}
	return s.base.Add(time.Duration(d))
}

// fits32 reports whether n is an int32.
func fits32(n int) bool { return n >= math.MinInt32 && n <= math.MaxInt32 }

// close stores the outcome of js, which finished, in its record: the
// record holds it from now on.
func (s *Sim) close(js *job) {
	r := s.recAt(js.idx)
	o := js.out
	sub, ok1 := s.packTime(o.Submit)
	st, ok2 := s.packTime(o.Start)
	end, ok3 := s.packTime(o.End)
	r.closed = true
	if !ok1 || !ok2 || !ok3 || !fits32(o.GPUs) || !fits32(o.Preemptions) || !fits32(o.Interrupted) {
		r.full = true
		if s.full == nil {
			s.full = map[int]*Outcome{}
		}
		c := *o
		s.full[js.idx] = &c
		return
	}
	r.submit, r.start, r.end = sub, st, end
	r.lostRun, r.milli = int64(o.LostRun), o.Milli
	r.gpus, r.preemptions, r.interrupted = int32(o.GPUs), int32(o.Preemptions), int32(o.Interrupted)
	r.started, r.finished = o.Started, o.Finished
}

// outcomeOf fills o with the outcome of the i-th job submitted. An
// unfinished job's is read from its record (the ID names it).
func (s *Sim) outcomeOf(i int, o *Outcome) {
	r := s.recAt(i)
	switch {
	case !r.closed:
		if js := s.jobs[string(s.idBytes(r))]; js != nil {
			*o = *js.out
			return
		}
		*o = Outcome{ID: string(s.idBytes(r))} // not reached: an open record's job is known
	case r.full:
		*o = *s.full[i]
	default:
		*o = Outcome{
			ID: string(s.idBytes(r)), Submit: s.unpackTime(r.submit), Start: s.unpackTime(r.start), End: s.unpackTime(r.end),
			Started: r.started, Finished: r.finished, GPUs: int(r.gpus), Milli: r.milli,
			Preemptions: int(r.preemptions), Interrupted: int(r.interrupted), LostRun: time.Duration(r.lostRun),
		}
	}
}

// finishedID reports whether id is the ID of a finished job.
func (s *Sim) finishedID(id string) bool {
	if s.sorted {
		// The IDs were enrolled in increasing order: a binary search of
		// the records finds id, if it is there.
		if s.njobs == 0 || id > s.lastID {
			return false
		}
		i := sort.Search(s.njobs, func(i int) bool { return string(s.idBytes(s.recAt(i))) >= id })
		return i < s.njobs && string(s.idBytes(s.recAt(i))) == id && s.recAt(i).closed
	}
	if i, ok := s.done[maphash.String(s.seed, id)]; ok && string(s.idBytes(s.recAt(i))) == id {
		return true
	}
	_, ok := s.doneX[id]
	return ok
}

// forget drops the record of js, which finished, from the jobs by ID: its
// ID stays known (finishedID).
func (s *Sim) forget(js *job) {
	delete(s.jobs, js.out.ID)
	if !s.sorted {
		s.addDone(js.out.ID, js.idx)
	}
}

// addDone adds id, of the finished job of record i, to the hash set of
// finished IDs.
func (s *Sim) addDone(id string, i int) {
	h := maphash.String(s.seed, id)
	if _, taken := s.done[h]; taken {
		if s.doneX == nil {
			s.doneX = map[string]struct{}{}
		}
		s.doneX[id] = struct{}{}
		return
	}
	s.done[h] = i
}

// enrolled notes the ID of the job enrolled next: while every ID is
// greater than the one before (a replay's are), the records are sorted by
// ID and finishedID searches them; the first that is not turns the hash
// set of finished IDs on, with those finished so far.
func (s *Sim) enrolled(id string) {
	if s.sorted && s.njobs > 0 && id <= s.lastID {
		s.sorted = false
		for i := range s.njobs {
			if r := s.recAt(i); r.closed {
				s.addDone(string(s.idBytes(r)), i)
			}
		}
	}
	s.lastID = id
}
