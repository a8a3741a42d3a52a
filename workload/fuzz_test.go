package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"testing"
)

// fuzzSeeds adds the hand-written samples and the head of a real trace.
func fuzzSeeds(f *testing.F, samples []string, rel string) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	if p, err := TracePath(rel); err == nil {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b[:min(len(b), 4096)])
		}
	}
}

// fuzzCheckErr checks that a loader error is a *ParseError naming the input
// and wrapping a sentinel (gzip errors excepted: they come from the stream).
func fuzzCheckErr(t *testing.T, err error, data []byte, gz bool) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error is not a *ParseError: %v", err)
	}
	if pe.File != "fuzz" {
		t.Fatalf("error names %q", pe.File)
	}
	if lines := bytes.Count(data, []byte("\n")) + 1; !gz && (pe.Line < 0 || pe.Line > lines) {
		t.Fatalf("error line %d outside 0..%d: %v", pe.Line, lines, err)
	}
	if !gz && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) &&
		!errors.Is(err, ErrFieldCount) && !errors.Is(err, ErrHeader) {
		t.Fatalf("error wraps no sentinel: %v", err)
	}
}

// fuzzCheckJobs checks what every loader promises about its jobs.
func fuzzCheckJobs(t *testing.T, tr *Trace, data []byte) {
	t.Helper()
	prev := 0
	for _, j := range tr.Jobs {
		if j.Line <= prev {
			t.Fatalf("job %q: line %d after %d", j.ID, j.Line, prev)
		}
		prev = j.Line
		if j.Submit < 0 || j.Runtime < 0 || j.Estimate < 0 || j.CPUMilli < 0 || j.MemoryMiB < 0 || j.NumGPU < 0 {
			t.Fatalf("negative value: %+v", j)
		}
		if j.GPUMilli < 0 || j.GPUMilli > 1000 {
			t.Fatalf("GPUMilli out of range: %+v", j)
		}
		if (j.GPUMilli == 1000 && j.GPUs != j.NumGPU) || (j.GPUMilli != 1000 && j.GPUs != 0) {
			t.Fatalf("GPUs inconsistent with NumGPU and GPUMilli: %+v", j)
		}
		if j.Submit+j.Runtime < j.Submit {
			t.Fatalf("times overflow: %+v", j)
		}
	}
	if lines := bytes.Count(data, []byte("\n")) + 1; len(tr.Jobs)+len(tr.Dropped) > lines {
		t.Fatalf("%d jobs and %d dropped from %d lines", len(tr.Jobs), len(tr.Dropped), lines)
	}
}

func FuzzSWF(f *testing.F) {
	fuzzSeeds(f, []string{swfSample, "; only: header\n", "1 0 -1 5 2 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1\n", "\x1f\x8b"}, SWFNASA)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadSWF(bytes.NewReader(data), "fuzz")
		gz := len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b
		if err != nil {
			fuzzCheckErr(t, err, data, gz)
			return
		}
		for _, j := range tr.Jobs {
			if j.Runtime <= 0 || j.GPUs <= 0 || j.GPUMilli != 1000 {
				t.Fatalf("SWF job not replayable: %+v", j)
			}
		}
		if gz {
			return
		}
		fuzzCheckJobs(t, tr, data)
		// The gzip path reads the same jobs.
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(data)
		_ = zw.Close()
		tz, err := ReadSWF(&buf, "fuzz")
		if err != nil {
			t.Fatalf("gzip of valid input fails: %v", err)
		}
		if len(tz.Jobs) != len(tr.Jobs) || len(tz.Dropped) != len(tr.Dropped) {
			t.Fatalf("gzip reads %d/%d jobs, plain %d/%d", len(tz.Jobs), len(tz.Dropped), len(tr.Jobs), len(tr.Dropped))
		}
	})
}

func FuzzITP(f *testing.F) {
	fuzzSeeds(f, []string{itpSample, "job_id,submission_time,duration,num_gpu\n\"a\"\"b\",1.5,2e3,8\n"}, ITPCluster04)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadITP(bytes.NewReader(data), "fuzz")
		if err != nil {
			fuzzCheckErr(t, err, data, false)
			return
		}
		fuzzCheckJobs(t, tr, data)
		for _, j := range tr.Jobs {
			if j.Runtime <= 0 || j.GPUs <= 0 || j.GPUMilli != 1000 {
				t.Fatalf("ITP job not replayable: %+v", j)
			}
		}
	})
}

func FuzzOpenbPods(f *testing.F) {
	fuzzSeeds(f, []string{podSample}, OpenbPods)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadOpenbPods(bytes.NewReader(data), "fuzz")
		if err != nil {
			fuzzCheckErr(t, err, data, false)
			return
		}
		fuzzCheckJobs(t, tr, data)
		if len(tr.Dropped) != 0 {
			t.Fatalf("pods dropped: %v", tr.Dropped)
		}
		for _, j := range tr.Jobs {
			if j.NumGPU == 0 && j.GPUMilli != 0 {
				t.Fatalf("GPU share without GPUs: %+v", j)
			}
			for _, m := range j.GPUModels {
				if m == "" {
					t.Fatalf("empty model: %+v", j)
				}
			}
		}
	})
}

func FuzzOpenbNodes(f *testing.F) {
	fuzzSeeds(f, []string{"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n"}, OpenbNodes)
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, err := ReadOpenbNodes(bytes.NewReader(data), "fuzz")
		if err != nil {
			fuzzCheckErr(t, err, data, false)
			return
		}
		prev := 0
		for _, n := range nodes {
			if n.GPUs < 0 || n.CPUMilli < 0 || n.MemoryMiB < 0 || n.Line <= prev {
				t.Fatalf("bad node %+v after line %d", n, prev)
			}
			prev = n.Line
		}
	})
}
