package slurm

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrParse: SLURM printed something the backend cannot read.
var ErrParse = errors.New("slurm: cannot parse")

// squeueOut is the part of `squeue --json` (data_parser of 22.05, the
// OpenAPI v0.0.38 job schema) the backend reads.
type squeueOut struct {
	Jobs []jobRec `json:"jobs"`
}

type jobRec struct {
	JobID           int64    `json:"job_id"`
	ArrayJobID      int64    `json:"array_job_id"`
	ArrayTaskID     *int64   `json:"array_task_id"`
	ArrayTaskString string   `json:"array_task_string"`
	State           string   `json:"job_state"`
	Partition       string   `json:"partition"`
	Account         string   `json:"account"`
	Comment         string   `json:"comment"`
	AdminComment    string   `json:"admin_comment"`
	TimeLimit       int64    `json:"time_limit"` // minutes
	NodeCount       int      `json:"node_count"`
	Nodes           string   `json:"nodes"`
	ReqNodes        string   `json:"required_nodes"` // sbatch -w, or a bind's NodeList
	TresPerNode     string   `json:"tres_per_node"`
	TresPerJob      string   `json:"tres_per_job"`
	Features        string   `json:"features"` // --constraint
	GresDetail      []string `json:"gres_detail"`
	SubmitTime      int64    `json:"submit_time"`
	StartTime       int64    `json:"start_time"`
	RestartCnt      int      `json:"restart_cnt"`
	StateReason     string   `json:"state_reason"`
	Resources       struct {
		Allocated []struct {
			Name string `json:"nodename"`
		} `json:"allocated_nodes"`
	} `json:"job_resources"`

	// detail: the fields users write (account, comment, limits, GRES)
	// were read; devs: GresDetail was read (both true from JSON; see
	// read.go).
	detail, devs bool
}

// sinfoOut is the part of `sinfo --json` the backend reads.
type sinfoOut struct {
	Nodes []nodeRec `json:"nodes"`
}

type nodeRec struct {
	Name       string   `json:"name"`
	State      string   `json:"state"`
	StateFlags []string `json:"state_flags"`
	Gres       string   `json:"gres"`
	Features   string   `json:"active_features"`
	Partitions []string `json:"partitions"`
	CPUs       int64    `json:"cpus"`
	Memory     int64    `json:"real_memory"` // MB
	// Reason is the reason an admin or SLURM gave for the node's state
	// ("ResumeTimeout reached"), set at ReasonChangedAt (Unix seconds).
	Reason          string `json:"reason"`
	ReasonChangedAt int64  `json:"reason_changed_at"`
}

func parseSqueue(b []byte) ([]jobRec, error) {
	var out squeueOut
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%w: squeue --json: %w", ErrParse, err)
	}
	for i := range out.Jobs {
		out.Jobs[i].detail, out.Jobs[i].devs = true, true
	}
	return out.Jobs, nil
}

func parseSinfo(b []byte) ([]nodeRec, error) {
	var out sinfoOut
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%w: sinfo --json: %w", ErrParse, err)
	}
	return out.Nodes, nil
}

// expandHostlist expands a SLURM hostlist ("node[01-03,07],gpu5") into
// names, in order.
func expandHostlist(s string) ([]string, error) {
	var out []string
	for len(s) > 0 {
		// One item: up to a comma outside brackets.
		depth, end := 0, len(s)
		for i, c := range s {
			if c == '[' {
				depth++
			} else if c == ']' {
				depth--
			} else if c == ',' && depth == 0 {
				end = i
				break
			}
		}
		item := s[:end]
		s = strings.TrimPrefix(s[end:], ",")
		lb := strings.IndexByte(item, '[')
		if lb < 0 {
			if item != "" {
				out = append(out, item)
			}
			continue
		}
		rb := strings.IndexByte(item, ']')
		if rb < lb {
			return nil, fmt.Errorf("%w: hostlist %q", ErrParse, item)
		}
		prefix, body, suffix := item[:lb], item[lb+1:rb], item[rb+1:]
		for _, r := range strings.Split(body, ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			z, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || z < a || z-a > 100000 {
				return nil, fmt.Errorf("%w: hostlist range %q", ErrParse, r)
			}
			for n := a; n <= z; n++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), n, suffix))
			}
		}
	}
	return out, nil
}

// parseIndexList reads "0-3,6" into ints.
func parseIndexList(s string) ([]int, error) {
	var out []int
	for _, r := range strings.Split(s, ",") {
		if r == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		z, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || z < a || z-a > 1<<20 {
			return nil, fmt.Errorf("%w: index list %q", ErrParse, s)
		}
		for i := a; i <= z; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// gres is one GPU GRES: "gpu:h100:8(S:0-1)" or "gpu:4(IDX:0-3)".
type gres struct {
	Type  string
	Count int
	IDX   []int // indices in use, when printed
}

var gresRE = regexp.MustCompile(`^(?:gres:)?gpu(?::([A-Za-z0-9_.-]+))?:(\d+)(?:\(([^)]*)\))?$`)

// parseGPUGres finds the GPU entry of a GRES list ("gpu:h100:8,nic:1").
// ok is false when there is none.
func parseGPUGres(s string) (g gres, ok bool, err error) {
	// Split on commas outside parentheses.
	depth, start := 0, 0
	var items []string
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	items = append(items, s[start:])
	for _, it := range items {
		it = strings.TrimSpace(it)
		if !strings.HasPrefix(it, "gpu") && !strings.HasPrefix(it, "gres:gpu") {
			continue
		}
		m := gresRE.FindStringSubmatch(it)
		if m == nil {
			return gres{}, false, fmt.Errorf("%w: GPU GRES %q", ErrParse, it)
		}
		g.Type = m[1]
		g.Count, _ = strconv.Atoi(m[2])
		if idx, found := strings.CutPrefix(m[3], "IDX:"); found && idx != "N/A" {
			if g.IDX, err = parseIndexList(idx); err != nil {
				return gres{}, false, err
			}
		}
		return g, true, nil
	}
	return gres{}, false, nil
}

// Request is what a job's comment asks of berth: `berth:required=block,preferred=rack`
// (either key may be left out). Other text in the comment is ignored.
type commentRequest struct {
	Required, Preferred string
}

var levelRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// parseComment reads the berth: token of a job comment.
func parseComment(c string) (commentRequest, error) {
	var r commentRequest
	for _, tok := range strings.Fields(c) {
		body, ok := strings.CutPrefix(tok, "berth:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(body, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if !levelRE.MatchString(v) {
				return r, fmt.Errorf("%w: comment %q: bad value %q", ErrBadJob, c, v)
			}
			switch k {
			case "required":
				r.Required = v
			case "preferred":
				r.Preferred = v
			default:
				return r, fmt.Errorf("%w: comment %q: unknown key %q (want required=, preferred=)", ErrBadJob, c, k)
			}
		}
	}
	return r, nil
}

// switchRec is one line of `scontrol show topology`.
type switchRec struct {
	Name  string
	Level int
	Nodes []string
}

// parseTopology reads `scontrol show topology` (topology/tree).
func parseTopology(b []byte) ([]switchRec, error) {
	var out []switchRec
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "SwitchName=") {
			continue
		}
		var s switchRec
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "SwitchName":
				s.Name = v
			case "Level":
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, fmt.Errorf("%w: topology line %q", ErrParse, line)
				}
				s.Level = n
			case "Nodes":
				ns, err := expandHostlist(v)
				if err != nil {
					return nil, err
				}
				s.Nodes = ns
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// taskIDs lists the tasks of a pending array record ("0-15%4", "1,3,5").
func taskIDs(s string) ([]int, error) {
	s, _, _ = strings.Cut(s, "%")
	var out []int
	for _, r := range strings.Split(s, ",") {
		// A step: "0-15:3".
		rng, stepS, hasStep := strings.Cut(r, ":")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%w: array tasks %q", ErrParse, s)
			}
			step = n
		}
		ids, err := parseIndexList(rng)
		if err != nil {
			return nil, err
		}
		for i, id := range ids {
			if i%step == 0 {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func unix(sec int64) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}
