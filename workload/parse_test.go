package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const swfSample = `; Version: 2.2
; Computer: Test machine
;              http://example.org/not-a-key
; MaxProcs: 128
; MaxProcs: 64
; Note: a second value of a key is ignored
    1        0     -1   1451  128     -1    -1   -1     -1    -1 -1   1   1  -1 -1 -1 -1 -1

    2     1460     12   3726   -1     -1    -1    8   4000  2048  1   7   2   3  1 -1 -1 -1
    3     5198     -1      0    4     -1    -1   -1     -1    -1 -1   1   1  -1 -1 -1 -1 -1
    4     5199     -1     10   -1     -1    -1   -1     -1    -1 -1   1   1  -1 -1 -1 -1 -1
	5	5200.5	-1	1.25	2	3.5	-1	-1	-1	-1	1	1	1	-1	-1	-1	-1	-1
`

func TestReadSWF(t *testing.T) {
	tr, err := ReadSWF(strings.NewReader(swfSample), "s.swf")
	require.NoError(t, err)
	assert.Equal(t, "s.swf", tr.Name)
	assert.Equal(t, map[string]string{
		"Version": "2.2", "Computer": "Test machine", "MaxProcs": "128",
		"Note": "a second value of a key is ignored",
	}, tr.Header)
	mp, ok := tr.HeaderInt("MaxProcs")
	assert.True(t, ok)
	assert.Equal(t, 128, mp)
	_, ok = tr.HeaderInt("Computer")
	assert.False(t, ok)

	require.Len(t, tr.Jobs, 3)
	assert.Equal(t, Job{
		ID: "1", Line: 7, Submit: 0, Runtime: 1451 * time.Second,
		GPUs: 128, NumGPU: 128, GPUMilli: 1000, User: "u1", Group: "g1",
	}, tr.Jobs[0])
	// Allocated processors unknown: the requested ones are used; requested
	// memory is KB per processor.
	assert.Equal(t, Job{
		ID: "2", Line: 9, Submit: 1460 * time.Second, Runtime: 3726 * time.Second,
		Estimate: 4000 * time.Second, GPUs: 8, NumGPU: 8, GPUMilli: 1000,
		MemoryMiB: 16, User: "u7", Group: "g2", Queue: "q1",
	}, tr.Jobs[1])
	assert.Equal(t, 5200500*time.Millisecond, tr.Jobs[2].Submit)
	assert.Equal(t, 1250*time.Millisecond, tr.Jobs[2].Runtime)
	assert.Equal(t, []Dropped{
		{Line: 10, ID: "3", Reason: "run time <= 0"},
		{Line: 11, ID: "4", Reason: "unknown processor count"},
	}, tr.Dropped)
}

func TestReadSWFGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write([]byte(swfSample))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	gz, err := ReadSWF(&buf, "s.swf.gz")
	require.NoError(t, err)
	plain, err := ReadSWF(strings.NewReader(swfSample), "s.swf.gz")
	require.NoError(t, err)
	assert.Equal(t, plain, gz)

	// A truncated gzip stream is an error, not a short trace.
	var buf2 bytes.Buffer
	zw = gzip.NewWriter(&buf2)
	_, _ = zw.Write([]byte(strings.Repeat(swfSample, 50)))
	require.NoError(t, zw.Close())
	_, err = ReadSWF(bytes.NewReader(buf2.Bytes()[:buf2.Len()/2]), "cut.gz")
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "cut.gz", pe.File)

	_, err = ReadSWF(bytes.NewReader([]byte{0x1f, 0x8b, 0, 0}), "bad.gz")
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 0, pe.Line)
}

// parseErrorCase is one malformed input and where its error must point.
type parseErrorCase struct {
	name  string
	input string
	line  int
	field string
	is    error
}

func checkParseErrors(t *testing.T, read func(string) error, cases []parseErrorCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := read(c.input)
			require.Error(t, err)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "f", pe.File)
			assert.Equal(t, c.line, pe.Line)
			assert.Equal(t, c.field, pe.Field)
			assert.ErrorIs(t, err, c.is)
			assert.Contains(t, err.Error(), "f:")
		})
	}
}

func TestReadSWFErrors(t *testing.T) {
	line := func(fields string) string { return "; h\n" + fields + "\n" }
	checkParseErrors(t, func(s string) error {
		_, err := ReadSWF(strings.NewReader(s), "f")
		return err
	}, []parseErrorCase{
		{"too few fields", line("1 2 3"), 2, "", ErrFieldCount},
		{"too many fields", line(strings.Repeat("1 ", 19)), 2, "", ErrFieldCount},
		{"not a number", line("1 0 -1 x 1 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"), 2, "run_time", ErrSyntax},
		{"below -1", line("1 0 -1 5 -2 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"), 2, "allocated_processors", ErrRange},
		{"fractional procs", line("1 0 -1 5 2.5 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"), 2, "allocated_processors", ErrSyntax},
		{"huge submit", line("1 4e9 -1 5 2 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"), 2, "submit_time", ErrRange},
		{"NaN", line("1 0 -1 NaN 2 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"), 2, "run_time", ErrSyntax},
		{"too many procs", line("1 0 -1 5 3e9 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"), 2, "allocated_processors", ErrRange},
		{"line too long", "1 " + strings.Repeat(" ", maxLineBytes+1), 1, "", ErrSyntax},
	})
}

const itpSample = "job_id,submission_time,duration,num_gpu\r\n" +
	"a,5810,288476,16\r\n" +
	"\r\n" +
	"b, 5813 ,292893.5,1\r\n" +
	"c,5900,0,1\r\n" +
	"d,5901,60,0\r\n"

func TestReadITP(t *testing.T) {
	tr, err := ReadITP(strings.NewReader(itpSample), "itp.csv")
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 2)
	assert.Equal(t, Job{ID: "a", Line: 2, Submit: 5810 * time.Second, Runtime: 288476 * time.Second,
		GPUs: 16, NumGPU: 16, GPUMilli: 1000}, tr.Jobs[0])
	assert.Equal(t, Job{ID: "b", Line: 4, Submit: 5813 * time.Second, Runtime: 292893500 * time.Millisecond,
		GPUs: 1, NumGPU: 1, GPUMilli: 1000}, tr.Jobs[1])
	assert.Equal(t, []Dropped{{Line: 5, ID: "c", Reason: "duration 0"}, {Line: 6, ID: "d", Reason: "num_gpu 0"}}, tr.Dropped)
	assert.Nil(t, tr.Header)

	// Columns are found by name: reordered columns and extra ones work, and a
	// byte order mark is ignored.
	tr2, err := ReadITP(strings.NewReader("\xef\xbb\xbfNUM_GPU,extra,duration,job_id,submission_time\n8,\"x,y\",100,\"q\"\"id\",7\n"), "r.csv")
	require.NoError(t, err)
	assert.Equal(t, []Job{{ID: `q"id`, Line: 2, Submit: 7 * time.Second, Runtime: 100 * time.Second,
		GPUs: 8, NumGPU: 8, GPUMilli: 1000}}, tr2.Jobs)
}

func TestReadITPErrors(t *testing.T) {
	const h = "job_id,submission_time,duration,num_gpu\n"
	checkParseErrors(t, func(s string) error {
		_, err := ReadITP(strings.NewReader(s), "f")
		return err
	}, []parseErrorCase{
		{"empty", "", 0, "", ErrHeader},
		{"blank lines only", "\n\n", 2, "", ErrHeader},
		{"missing column", "job_id,submission_time,duration\n", 1, "num_gpu", ErrHeader},
		{"field count", h + "a,1,2,3\nb,1,2\n", 3, "", ErrFieldCount},
		{"bad number", h + "a,1,2,x\n", 2, "num_gpu", ErrSyntax},
		{"fractional gpus", h + "a,1,2,1.5\n", 2, "num_gpu", ErrSyntax},
		{"negative gpus", h + "a,1,2,-1\n", 2, "num_gpu", ErrRange},
		{"negative submit", h + "a,-1,2,1\n", 2, "submission_time", ErrRange},
		{"empty duration", h + "a,1,,1\n", 2, "duration", ErrSyntax},
		{"huge duration", h + "a,1,1e300,1\n", 2, "duration", ErrRange},
		{"open quote", h + "\"a,1,2,1\n", 2, "", ErrSyntax},
		{"stray quote", h + "a\"b,1,2,1\n", 2, "", ErrSyntax},
		{"text after quote", h + "\"a\"b,1,2,1\n", 2, "", ErrSyntax},
	})
}

const podSample = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,12000,16384,1,1000,,LS,Running,0,12537496,0
p1,6000,12288,1,460,V100M16|V100M32,BE,Running,427061,12902960,427061
p2,4000,0,0,0,,BE,Pending,5,100,
p3,8000,100,8,1000,T4| ,LS,Failed,10,10,20
p4,8000,100,1,1500,,LS,Running,1,2,1
p5,8000,100,1,-3,,LS,Running,1,2,1
p6,8000,100,0,700,V100M16|V100M32,LS,Running,1,2,1
`

func TestReadOpenbPods(t *testing.T) {
	tr, err := ReadOpenbPods(strings.NewReader(podSample), "pods.csv")
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 7)
	assert.Empty(t, tr.Dropped)
	assert.Equal(t, Job{ID: "p0", Line: 2, Runtime: 12537496 * time.Second, GPUs: 1, NumGPU: 1, GPUMilli: 1000,
		CPUMilli: 12000, MemoryMiB: 16384, QoS: "LS"}, tr.Jobs[0])
	assert.Equal(t, Job{ID: "p1", Line: 3, Submit: 427061 * time.Second, Runtime: (12902960 - 427061) * time.Second,
		GPUs: 0, NumGPU: 1, GPUMilli: 460, CPUMilli: 6000, MemoryMiB: 12288,
		GPUModels: []string{"V100M16", "V100M32"}, QoS: "BE"}, tr.Jobs[1])
	p := tr.Jobs
	assert.True(t, p[1].Shared())
	assert.Equal(t, int64(460), p[1].DemandMilli())
	// Pending pod: no scheduled time, no runtime.
	assert.Equal(t, Job{ID: "p2", Line: 4, Submit: 5 * time.Second, CPUMilli: 4000, QoS: "BE"}, p[2])
	assert.False(t, p[2].Shared())
	// Deleted before scheduled: runtime 0, not negative. Empty model entries dropped.
	assert.Equal(t, time.Duration(0), p[3].Runtime)
	assert.Equal(t, []string{"T4"}, p[3].GPUModels)
	assert.Equal(t, int64(8000), p[3].DemandMilli())
	assert.Equal(t, 8, p[3].GPUs)
	// gpu_milli clamps (docs/fgd.md, Procedure step 1): above 1000 to 1000, at most 0 to 0, and 0
	// with no GPUs.
	assert.Equal(t, [3]int{1000, 0, 0}, [3]int{p[4].GPUMilli, p[5].GPUMilli, p[6].GPUMilli})
	assert.Equal(t, [3]int{1, 0, 0}, [3]int{p[4].GPUs, p[5].GPUs, p[6].GPUs})
	assert.False(t, p[5].Shared())
	assert.Equal(t, p[1].GPUModels, p[6].GPUModels)

	// Only the five resource columns are required.
	tr, err = ReadOpenbPods(strings.NewReader("gpu_milli,num_gpu,memory_mib,cpu_milli,name\n250,1,1,1,x\n"), "min.csv")
	require.NoError(t, err)
	assert.Equal(t, []Job{{ID: "x", Line: 2, NumGPU: 1, GPUMilli: 250, CPUMilli: 1, MemoryMiB: 1}}, tr.Jobs)
}

func TestReadOpenbPodsErrors(t *testing.T) {
	const h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	checkParseErrors(t, func(s string) error {
		_, err := ReadOpenbPods(strings.NewReader(s), "f")
		return err
	}, []parseErrorCase{
		{"missing column", "name,cpu_milli,memory_mib,num_gpu\n", 1, "gpu_milli", ErrHeader},
		{"negative cpu", h + "p,-1,1,1,1000,,LS,Running,0,1,0\n", 2, "cpu_milli", ErrRange},
		{"bad memory", h + "p,1,1GiB,1,1000,,LS,Running,0,1,0\n", 2, "memory_mib", ErrSyntax},
		{"negative gpus", h + "p,1,1,-8,1000,,LS,Running,0,1,0\n", 2, "num_gpu", ErrRange},
		{"bad creation", h + "p,1,1,1,1000,,LS,Running,x,1,0\n", 2, "creation_time", ErrSyntax},
		{"bad deletion", h + "p,1,1,1,1000,,LS,Running,0,-5,0\n", 2, "deletion_time", ErrRange},
		{"bad scheduled", h + "p,1,1,1,1000,,LS,Running,0,5,y\n", 2, "scheduled_time", ErrSyntax},
		{"field count", h + "p,1,1,1,1000\n", 2, "", ErrFieldCount},
	})
}

func TestReadOpenbNodes(t *testing.T) {
	nodes, err := ReadOpenbNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8, G2 \ncpu,32000,1024,0,\n"), "nodes.csv")
	require.NoError(t, err)
	assert.Equal(t, []Node{
		{Name: "n0", Line: 2, CPUMilli: 64000, MemoryMiB: 262144, GPUs: 2, Model: "P100"},
		{Name: "n1", Line: 3, CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "G2"},
		{Name: "cpu", Line: 4, CPUMilli: 32000, MemoryMiB: 1024},
	}, nodes)

	const h = "sn,cpu_milli,memory_mib,gpu,model\n"
	checkParseErrors(t, func(s string) error {
		_, err := ReadOpenbNodes(strings.NewReader(s), "f")
		return err
	}, []parseErrorCase{
		{"missing model", "sn,cpu_milli,memory_mib,gpu\n", 1, "model", ErrHeader},
		{"negative gpus", h + "n,1,1,-1,G2\n", 2, "gpu", ErrRange},
		{"bad cpu", h + "n,1.5,1,1,G2\n", 2, "cpu_milli", ErrSyntax},
		{"bad memory", h + "n,1,,1,G2\n", 2, "memory_mib", ErrSyntax},
	})
}

// errReader fails after its data, like a broken disk or connection.
type errReader struct{ data []byte }

var errDisk = errors.New("disk on fire")

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errDisk
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadIOError(t *testing.T) {
	_, err := ReadITP(&errReader{data: []byte("job_id,submission_time,duration,num_gpu\na,1,2,3\n")}, "f")
	assert.ErrorIs(t, err, errDisk)
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 3, pe.Line)
	_, err = ReadSWF(&errReader{data: []byte("; x\n")}, "f")
	assert.ErrorIs(t, err, errDisk)
	_, err = OpenITP("/nonexistent/itp.csv")
	assert.Error(t, err)
}

func TestSplitCSV(t *testing.T) {
	for in, want := range map[string][]string{
		"":                  {""},
		"a":                 {"a"},
		"a,b":               {"a", "b"},
		" a , b ":           {"a", "b"},
		",":                 {"", ""},
		`"a,b",c`:           {"a,b", "c"},
		`"",x`:              {"", "x"},
		`"say ""hi""" , z`:  {`say "hi"`, "z"},
		"a,\"b\"":           {"a", "b"},
		"x,y,z,":            {"x", "y", "z", ""},
		"\"q\"\t,\"r\"\t  ": {"q", "r"},
	} {
		got, err := splitCSV(nil, []byte(in))
		require.NoError(t, err, in)
		s := make([]string, len(got))
		for i, f := range got {
			s[i] = string(f)
		}
		assert.Equal(t, want, s, in)
	}
}

// onlyReader hides Len and Stat, so loaders cannot size their buffers.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestLoadSizing checks that sizing the job buffer from the input size
// (exact, underestimated when later lines are shorter, or unknown) never
// changes what is read.
func TestLoadSizing(t *testing.T) {
	var b strings.Builder
	b.WriteString("job_id,submission_time,duration,num_gpu\n")
	for i := range 3000 {
		id := fmt.Sprintf("job-%d", i)
		if i < 300 { // long lines first: the estimate from them is too small
			id += strings.Repeat("x", 200)
		}
		fmt.Fprintf(&b, "%s,%d,%d,%d\n", id, i, 600+i, 1<<(i%7))
	}
	in := b.String()
	sized, err := ReadITP(strings.NewReader(in), "f")
	require.NoError(t, err)
	unsized, err := ReadITP(onlyReader{strings.NewReader(in)}, "f")
	require.NoError(t, err)
	require.Len(t, sized.Jobs, 3000)
	assert.Equal(t, unsized, sized)
	assert.Equal(t, "job-2999", sized.Jobs[2999].ID)
	assert.Equal(t, 3001, sized.Jobs[2999].Line)

	f, err := os.CreateTemp(t.TempDir(), "itp*.csv")
	require.NoError(t, err)
	_, err = f.WriteString(in)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	fromFile, err := OpenITP(f.Name())
	require.NoError(t, err)
	fromFile.Name = "f"
	assert.Equal(t, sized, fromFile)
}
