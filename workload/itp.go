package workload

import (
	"fmt"
	"io"
	"os"
)

var itpColumns = []string{"job_id", "submission_time", "duration", "num_gpu"}

const (
	itpID = iota
	itpSubmit
	itpDuration
	itpGPUs
)

// ReadITP reads a GPU job trace in the CSV format of the Microsoft ITP
// clusters published with ElasticFlow (header
// "job_id,submission_time,duration,num_gpu"; columns are found by name, so
// order and extra columns do not matter). name labels errors.
//
// Mapping: ID = job_id; Submit = submission_time and Runtime = duration
// (seconds, integer or decimal); GPUs = NumGPU = num_gpu; GPUMilli = 1000.
// The trace has no estimates (Estimate is 0; see InflateEstimates), no
// users and no queues. Jobs with duration 0 or num_gpu 0 are listed in
// Trace.Dropped (cluster04 has none); negative values are errors.
func ReadITP(r io.Reader, name string) (*Trace, error) {
	c, err := newCSVReader(r, name, itpColumns, len(itpColumns))
	if err != nil {
		return nil, err
	}
	t := &Trace{Name: name}
	buf := c.buffer()
	for {
		ok, err := c.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			t.Jobs, t.Warnings = buf.jobs(), c.lr.warnings()
			return t, nil
		}
		submit, err := c.seconds(itpSubmit)
		if err != nil {
			return nil, err
		}
		run, err := c.seconds(itpDuration)
		if err != nil {
			return nil, err
		}
		gpus, err := c.int(itpGPUs, 0, maxCount)
		if err != nil {
			return nil, err
		}
		switch {
		case run == 0:
			t.Dropped = append(t.Dropped, Dropped{Line: c.line(), ID: string(c.field(itpID)), Reason: "duration 0"})
			continue
		case gpus == 0:
			t.Dropped = append(t.Dropped, Dropped{Line: c.line(), ID: string(c.field(itpID)), Reason: "num_gpu 0"})
			continue
		}
		buf.add(Job{
			Line:     c.line(),
			Submit:   submit,
			Runtime:  run,
			GPUs:     int(gpus),
			NumGPU:   int(gpus),
			GPUMilli: 1000,
		}, c.field(itpID))
	}
}

// OpenITP reads the ITP CSV file at path; see ReadITP.
func OpenITP(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	return ReadITP(f, path)
}
