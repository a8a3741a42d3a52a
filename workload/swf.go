package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
)

// swfFields names the 18 fields of a Standard Workload Format job line, as
// used in errors.
var swfFields = [18]string{
	"job_number", "submit_time", "wait_time", "run_time", "allocated_processors",
	"average_cpu_time", "used_memory", "requested_processors", "requested_time",
	"requested_memory", "status", "user_id", "group_id", "executable", "queue",
	"partition", "preceding_job", "think_time",
}

// SWF field positions (0-based) that the loader uses.
const (
	swfJob       = 0
	swfSubmit    = 1
	swfRun       = 3
	swfAlloc     = 4
	swfReqProcs  = 7
	swfReqTime   = 8
	swfReqMemory = 9
	swfUser      = 11
	swfGroup     = 12
	swfQueue     = 14
)

// ReadSWF reads a log in the Standard Workload Format v2.2
// (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html), plain or
// gzip-compressed (recognised by its magic bytes). name labels errors.
//
// Lines starting with ';' are header lines; those of the form
// "; Key: value" (at most one blank after ';', a key without blanks) fill
// Trace.Header. Every other non-blank line must hold exactly 18 numbers;
// -1 means unknown and any value below -1 is an error.
//
// Mapping: ID = field 1 as written; Submit = field 2; Runtime = field 4;
// GPUs = NumGPU = allocated processors (field 5), else requested processors
// (field 8); GPUMilli = 1000; Estimate = requested time (field 9), 0 when
// unknown; MemoryMiB = requested memory (field 10, KB per processor) x
// processors / 1024, 0 when unknown; User "u<field 12>", Group
// "g<field 13>", Queue "q<field 15>", each "" when unknown. The estimate is
// kept as logged, even when it is below the runtime.
//
// Jobs that cannot be replayed are listed in Trace.Dropped instead of
// Trace.Jobs: run time <= 0 (0 or unknown; in the NASA log these are 173
// jobs with run time 0), unknown submit time, or no processor count.
func ReadSWF(r io.Reader, name string) (*Trace, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &ParseError{File: name, Err: fmt.Errorf("gzip: %w", err)}
		}
		defer zr.Close()
		return readSWF(zr, name, 0)
	}
	return readSWF(br, name, sizeOf(r))
}

// OpenSWF reads the SWF file at path (plain or .gz); see ReadSWF.
func OpenSWF(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	return ReadSWF(f, path)
}

func readSWF(r io.Reader, name string, size int64) (*Trace, error) {
	t := &Trace{Name: name, Header: map[string]string{}}
	lr := newLineReader(r, name)
	var fields [][]byte
	var vals [18]float64
	buf := jobBuffer{size: size, consumed: func() int64 { return lr.read }}
	names := interner{}
	var nameBuf []byte
	swfName := func(prefix byte, v float64) string {
		if v < 0 {
			return ""
		}
		nameBuf = strconv.AppendInt(append(nameBuf[:0], prefix), int64(v), 10)
		return names.get(nameBuf)
	}
	for {
		line, ok := lr.next()
		if !ok {
			if err := lr.err(); err != nil {
				return nil, err
			}
			t.Jobs, t.Warnings = buf.jobs(), lr.warnings()
			return t, nil
		}
		if len(line) > 0 && line[0] == ';' {
			swfHeader(t.Header, line[1:])
			continue
		}
		fields = splitSpace(fields, line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != len(swfFields) {
			return nil, &ParseError{File: name, Line: lr.line,
				Err: fmt.Errorf("%w: %d fields, SWF has 18", ErrFieldCount, len(fields))}
		}
		fail := func(i int, err error) error {
			return &ParseError{File: name, Line: lr.line, Field: swfFields[i], Err: err}
		}
		for i, f := range fields {
			v, ok := parseNumber(f)
			if !ok {
				return nil, fail(i, fmt.Errorf("%w: not a number: %s", ErrSyntax, quoteValue(f)))
			}
			if v < -1 || v > 1e15 {
				return nil, fail(i, fmt.Errorf("%w: %s", ErrRange, quoteValue(f)))
			}
			vals[i] = v
		}
		for _, i := range [...]int{swfAlloc, swfReqProcs, swfUser, swfGroup, swfQueue} {
			if vals[i] != math.Trunc(vals[i]) {
				return nil, fail(i, fmt.Errorf("%w: not an integer: %s", ErrSyntax, quoteValue(fields[i])))
			}
		}
		for _, i := range [...]int{swfSubmit, swfRun, swfReqTime} {
			if vals[i] > maxSeconds {
				return nil, fail(i, fmt.Errorf("%w: %s s exceeds %d", ErrRange, quoteValue(fields[i]), maxSeconds))
			}
		}
		procs := vals[swfAlloc]
		if procs <= 0 {
			procs = vals[swfReqProcs]
		}
		reason := ""
		switch {
		case vals[swfRun] <= 0:
			reason = "run time <= 0"
		case vals[swfSubmit] < 0:
			reason = "unknown submit time"
		case procs <= 0:
			reason = "unknown processor count"
		case procs > maxCount:
			return nil, fail(swfAlloc, fmt.Errorf("%w: %v processors", ErrRange, procs))
		}
		if reason != "" {
			t.Dropped = append(t.Dropped, Dropped{Line: lr.line, ID: string(fields[swfJob]), Reason: reason})
			continue
		}
		j := Job{
			Line:     lr.line,
			Submit:   toDuration(vals[swfSubmit]),
			Runtime:  toDuration(vals[swfRun]),
			GPUs:     int(procs),
			NumGPU:   int(procs),
			GPUMilli: 1000,
			User:     swfName('u', vals[swfUser]),
			Group:    swfName('g', vals[swfGroup]),
			Queue:    swfName('q', vals[swfQueue]),
		}
		if vals[swfReqTime] > 0 {
			j.Estimate = toDuration(vals[swfReqTime])
		}
		if m := vals[swfReqMemory]; m > 0 {
			j.MemoryMiB = int64(m * procs / 1024)
		}
		buf.add(j, fields[swfJob])
	}
}

// swfHeader records "Key: value" from a header line (without its ';').
func swfHeader(h map[string]string, b []byte) {
	if len(b) > 0 && isBlank(b[0]) {
		b = b[1:]
	}
	k := bytes.IndexByte(b, ':')
	if k <= 0 {
		return
	}
	key := b[:k]
	for _, c := range key {
		if isBlank(c) {
			return
		}
	}
	if _, dup := h[string(key)]; dup {
		return
	}
	h[string(key)] = string(bytes.TrimSpace(b[k+1:]))
}
