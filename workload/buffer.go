package workload

import (
	"io"
	"os"
)

// jobBuffer collects the jobs of a loader without the copies of a growing
// slice, which dominate the cost of a load (a Job is 176 bytes with
// pointers). When the input size is known, the first 256 jobs give the
// bytes per line and the rest of the file is allocated in one piece; else
// jobs go into chunks of doubling size (256 up to 8,192) that are joined
// once at the end. The IDs of a chunk share one string, so a 15,000-job
// trace costs a handful of allocations rather than one per job.
type jobBuffer struct {
	chunks [][]Job
	cur    []Job
	arena  []byte // the IDs of cur, back to back
	ends   []int  // end of each cur job's ID in arena
	n      int

	size     int64        // input bytes, 0 when unknown
	consumed func() int64 // input bytes read so far
	sized    bool         // the one sizing from the input was done
}

// sizeOf returns the bytes left in r when r knows it cheaply, else 0.
func sizeOf(r any) int64 {
	switch v := r.(type) {
	case interface{ Len() int }: // bytes.Reader, strings.Reader, bytes.Buffer
		return int64(v.Len())
	case interface{ Stat() (os.FileInfo, error) }: // *os.File
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0
		}
		if s, ok := v.(io.Seeker); ok {
			if off, err := s.Seek(0, io.SeekCurrent); err == nil {
				return max(0, fi.Size()-off)
			}
		}
	}
	return 0
}

const (
	firstChunk = 256
	maxChunk   = 8192
)

// add appends j with ID id (copied; j.ID is overwritten).
func (b *jobBuffer) add(j Job, id []byte) {
	if b.cur == nil {
		size := firstChunk
		if k := len(b.chunks); k > 0 {
			size = min(maxChunk, 2*cap(b.chunks[k-1]))
		}
		b.cur = make([]Job, 0, size)
	}
	b.arena = append(b.arena, id...)
	b.ends = append(b.ends, len(b.arena))
	b.cur = append(b.cur, j)
	b.n++
	if len(b.cur) == cap(b.cur) {
		if b.size > 0 && !b.sized && b.consumed != nil {
			b.sized = true
			b.grow()
			return
		}
		b.flush()
	}
}

// grow replaces the first chunk by one sized for the whole input, from the
// bytes per job seen so far (plus 5% and a margin, so a file of uniform
// lines fits; if it does not, chunking takes over).
func (b *jobBuffer) grow() {
	used := b.consumed()
	if used <= 0 {
		b.flush()
		return
	}
	perJob := float64(used) / float64(b.n)
	rest := float64(b.size-used) / perJob * 1.05
	if rest > 1<<26 { // a wild guess; stay with chunks
		b.flush()
		return
	}
	jobs := len(b.cur) + int(rest) + 64
	if jobs <= cap(b.cur) {
		b.flush()
		return
	}
	next := make([]Job, len(b.cur), jobs)
	copy(next, b.cur)
	b.cur = next
	arena := make([]byte, len(b.arena), len(b.arena)*jobs/len(b.ends)+64)
	copy(arena, b.arena)
	b.arena = arena
	b.ends = append(make([]int, 0, jobs), b.ends...)
}

func (b *jobBuffer) flush() {
	if len(b.cur) == 0 {
		return
	}
	s := string(b.arena)
	start := 0
	for i, end := range b.ends {
		b.cur[i].ID = s[start:end]
		start = end
	}
	b.chunks = append(b.chunks, b.cur)
	b.cur, b.arena, b.ends = nil, b.arena[:0], b.ends[:0]
}

// jobs returns all jobs in order; nil when there are none.
func (b *jobBuffer) jobs() []Job {
	b.flush()
	switch len(b.chunks) {
	case 0:
		return nil
	case 1:
		return b.chunks[0]
	}
	out := make([]Job, 0, b.n)
	for _, c := range b.chunks {
		out = append(out, c...)
	}
	return out
}

// interner returns one shared string per distinct value.
type interner map[string]string

func (in interner) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := in[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	in[s] = s
	return s
}
