package workload

import (
	"strings"
	"testing"
)

// A trace whose last line has no newline is reported: it may have been
// cut mid-number ("...,16" read as "...,1"). A complete file is not.
func TestUnterminatedLastLineReported(t *testing.T) {
	cut := strings.TrimSuffix(itpSample, "\r\n")
	tr, err := ReadITP(strings.NewReader(cut), "itp.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Warnings) != 1 || !strings.Contains(tr.Warnings[0], "line 6, the last, has no newline") {
		t.Fatalf("warnings %q", tr.Warnings)
	}
	tr, err = ReadITP(strings.NewReader(itpSample), "itp.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Warnings) != 0 {
		t.Fatalf("a complete file warned: %q", tr.Warnings)
	}
	swf := "; Version: 2.2\n1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1"
	ts, err := ReadSWF(strings.NewReader(swf), "x.swf")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.Warnings) != 1 {
		t.Fatalf("swf warnings %q", ts.Warnings)
	}
	if ts, err = ReadSWF(strings.NewReader(swf+"\n"), "x.swf"); err != nil || len(ts.Warnings) != 0 {
		t.Fatalf("complete swf: %v %q", err, ts.Warnings)
	}
}
