package metrics

import (
	"encoding/json"
	"strconv"
	"time"
)

// resultJSON is Result's wire form: durations in float64 seconds.
type resultJSON struct {
	Policy               string  `json:"policy"`
	Utilization          float64 `json:"utilization"`
	AvgWait              float64 `json:"avg_wait_s"`
	P95Wait              float64 `json:"p95_wait_s"`
	AvgJCT               float64 `json:"avg_jct_s"`
	AvgBSLD              float64 `json:"avg_bsld"`
	Makespan             float64 `json:"makespan_s"`
	Preemptions          int     `json:"preemptions"`
	Jobs                 int     `json:"jobs"`
	Finished             int     `json:"finished"`
	FragFreeGPUs         float64 `json:"frag_free_gpus"`
	LargestPlaceableGang int     `json:"largest_placeable_gang"`
}

// MarshalJSON writes the row with the keys policy, utilization,
// avg_wait_s, p95_wait_s, avg_jct_s, avg_bsld, makespan_s, preemptions,
// jobs, finished, frag_free_gpus and largest_placeable_gang, durations as
// float64 seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultJSON{
		Policy:               r.Policy,
		Utilization:          r.Utilization,
		AvgWait:              r.AvgWait.Seconds(),
		P95Wait:              r.P95Wait.Seconds(),
		AvgJCT:               r.AvgJCT.Seconds(),
		AvgBSLD:              r.AvgBSLD,
		Makespan:             r.Makespan.Seconds(),
		Preemptions:          r.Preemptions,
		Jobs:                 r.Jobs,
		Finished:             r.Finished,
		FragFreeGPUs:         r.FragFreeGPUs,
		LargestPlaceableGang: r.LargestPlaceableGang,
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result{
		Policy:               j.Policy,
		Utilization:          j.Utilization,
		AvgWait:              seconds(j.AvgWait),
		P95Wait:              seconds(j.P95Wait),
		AvgJCT:               seconds(j.AvgJCT),
		AvgBSLD:              j.AvgBSLD,
		Makespan:             seconds(j.Makespan),
		Preemptions:          j.Preemptions,
		Jobs:                 j.Jobs,
		Finished:             j.Finished,
		FragFreeGPUs:         j.FragFreeGPUs,
		LargestPlaceableGang: j.LargestPlaceableGang,
	}
	return nil
}

// CSVHeader returns the column names of CSVRecord: the JSON keys, in the
// same order.
func CSVHeader() []string {
	return []string{
		"policy", "utilization", "avg_wait_s", "p95_wait_s", "avg_jct_s", "avg_bsld",
		"makespan_s", "preemptions", "jobs", "finished", "frag_free_gpus", "largest_placeable_gang",
	}
}

// CSVRecord returns the row as CSV fields matching CSVHeader (shortest
// decimal that reads back exactly; durations in seconds).
func (r Result) CSVRecord() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	s := func(d time.Duration) string { return f(d.Seconds()) }
	return []string{
		r.Policy, f(r.Utilization), s(r.AvgWait), s(r.P95Wait), s(r.AvgJCT), f(r.AvgBSLD),
		s(r.Makespan), strconv.Itoa(r.Preemptions), strconv.Itoa(r.Jobs), strconv.Itoa(r.Finished),
		f(r.FragFreeGPUs), strconv.Itoa(r.LargestPlaceableGang),
	}
}
