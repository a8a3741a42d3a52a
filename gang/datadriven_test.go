package gang_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/topo"
	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scenario files in testdata/. Commands:
//
//	cluster levels=block,rack fanout=2,2 nodes=2 gpus=8 [model=H100]
//	node name=x domains=b0,r0 gpus=4 [model=A100] [labels=k:v,k:v] [cpu=..] [mem=..]   (after "cluster levels=...", adds one node; "build" finishes)
//	alloc node=n0 gpus=3          books the node's lowest free GPUs
//	state node=n0 down
//	place members=4 per=2 [required=block] [preferred=rack] [model=A100] [selector=k:v] [group=...]  (more groups: "and members=.. per=..")
//	apply                          books the last placement
//	undo                           releases it
//	domains level=rack             free GPUs and whole free nodes per domain
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var spec topo.Spec
		var s *topo.Snapshot
		var last gang.Result
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(k string) string {
				for _, a := range d.CmdArgs {
					if a.Key == k {
						return strings.Join(a.Vals, ",")
					}
				}
				return ""
			}
			num := func(k string) int {
				v, err := strconv.Atoi(arg(k))
				if err != nil {
					d.Fatalf(t, "%s: %v", k, err)
				}
				return v
			}
			node := func() topo.NodeID {
				id, ok := s.Cluster().NodeByName(arg("node"))
				if !ok {
					d.Fatalf(t, "unknown node %q", arg("node"))
				}
				return id
			}
			switch d.Cmd {
			case "cluster":
				var fan []int
				for _, f := range strings.Split(arg("fanout"), ",") {
					n, _ := strconv.Atoi(f)
					fan = append(fan, n)
				}
				model := arg("model")
				if model == "" {
					model = "H100"
				}
				spec = topo.Uniform(strings.Split(arg("levels"), ","), fan, num("nodes"), num("gpus"), model)
				if arg("defer") != "" {
					spec.Nodes = nil // nodes follow with "node", then "build"
					return ""
				}
				return build(t, d, spec, &s)
			case "node":
				n := topo.NodeSpec{Name: arg("name"), Domains: strings.Split(arg("domains"), ","), GPUs: num("gpus"), GPUModel: arg("model")}
				if l := arg("labels"); l != "" {
					n.Labels = map[string]string{}
					for _, kv := range strings.Split(l, ",") {
						k, v, _ := strings.Cut(kv, ":")
						n.Labels[k] = v
					}
				}
				if arg("mig") != "" {
					n.MIG = true
					n.MIGLayout = strings.ReplaceAll(arg("mig"), ",", " ")
					if n.MIGLayout == "on" {
						n.MIGLayout = ""
					}
				}
				if v := arg("ts"); v != "" {
					r, _ := strconv.Atoi(v)
					n.Sharing = mig.Sharing{Mode: mig.TimeSlicing, Replicas: r}
				}
				spec.Nodes = append(spec.Nodes, n)
				return ""
			case "build":
				spec.ShareFreeGPUs = arg("sharefree") != ""
				return build(t, d, spec, &s)
			case "alloc":
				id := node()
				first, g := s.Cluster().NodeGPUs(id)
				var gpus []uint32
				m := s.NodeFreeMask(id)
				for i := 0; i < g && len(gpus) < num("gpus"); i++ {
					if m&(1<<i) != 0 {
						gpus = append(gpus, first+uint32(i))
					}
				}
				if err := s.Allocate(gpus); err != nil {
					return "error: " + err.Error()
				}
				return ""
			case "state":
				st, err := topo.ParseNodeState(d.CmdArgs[1].Key)
				if err != nil {
					return "error: " + err.Error()
				}
				if err := s.SetNodeState(node(), st); err != nil {
					return "error: " + err.Error()
				}
				return ""
			case "place":
				r := parseRequest(t, d)
				res, err := gang.Place(s, &r)
				if err != nil {
					return "error: " + err.Error()
				}
				last = res
				return describe(s, res)
			case "apply":
				if err := last.Apply(s); err != nil {
					return "error: " + err.Error()
				}
				out := fmt.Sprintf("free %d", s.Free())
				for _, g := range last.Grants() {
					out += fmt.Sprintf("\n  gpu %d: %v", g.GPU, grant(g))
				}
				return out
			case "undo":
				if err := last.Undo(s); err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("free %d", s.Free())
			case "domains":
				c := s.Cluster()
				l, err := c.Level(arg("level"))
				if err != nil {
					return "error: " + err.Error()
				}
				var b strings.Builder
				for i := range c.NumDomains(l) {
					fmt.Fprintf(&b, "%s free=%d whole=%d\n", c.Domain(l, i).Name, s.DomainFree(l, i), s.DomainWholeNodes(l, i))
				}
				return b.String()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func build(t *testing.T, d *datadriven.TestData, spec topo.Spec, s **topo.Snapshot) string {
	c, err := topo.New(spec)
	if err != nil {
		return "error: " + err.Error()
	}
	*s = c.NewSnapshot()
	return fmt.Sprintf("%d nodes, %d GPUs, levels %v", c.NumNodes(), c.NumGPUs(), c.Levels())
}

// parseRequest reads groups separated by the bare key "and".
func parseRequest(t *testing.T, d *datadriven.TestData) gang.Request {
	var r gang.Request
	g := gang.Group{}
	flush := func() {
		r.Groups = append(r.Groups, g)
		g = gang.Group{}
	}
	for _, a := range d.CmdArgs {
		v := strings.Join(a.Vals, ",")
		n, _ := strconv.Atoi(v)
		switch a.Key {
		case "and":
			flush()
		case "members":
			g.Members = n
		case "per":
			g.GPUsPerMember = n
		case "milli":
			g.GPUMilli = n
		case "profile":
			g.MIGProfile = v
		case "cpu":
			g.CPUMilli = int64(n)
		case "model":
			g.GPUModel = v
		case "selector":
			g.Selector = map[string]string{}
			for _, kv := range a.Vals {
				k, val, _ := strings.Cut(kv, ":")
				g.Selector[k] = val
			}
		case "required":
			r.Required = v
		case "preferred":
			r.Preferred = v
		default:
			d.Fatalf(t, "unknown place argument %q", a.Key)
		}
	}
	flush()
	return r
}

func describe(s *topo.Snapshot, res gang.Result) string {
	if !res.Found {
		return fmt.Sprintf("no: %v (%v)", res.Reason, res.Reason.Code)
	}
	c := s.Cluster()
	var b strings.Builder
	fmt.Fprintf(&b, "found: spread")
	for l, n := range res.Spread {
		fmt.Fprintf(&b, " %s=%d", c.Levels()[l], n)
	}
	fmt.Fprintf(&b, " nodes=%d\n", res.Nodes)
	for i := 0; i < len(res.Members); {
		m := res.Members[i]
		j := i
		for j < len(res.Members) && res.Members[j].Node == m.Node && res.Members[j].Group == m.Group {
			j++
		}
		var gpus []string
		for k := i; k < j; k++ {
			gpus = append(gpus, fmt.Sprint(res.MemberGPUs(k)))
		}
		fmt.Fprintf(&b, "  group %d: %s x%d %s\n", m.Group, c.NodeName(m.Node), j-i, strings.Join(gpus, " "))
		i = j
	}
	return b.String()
}

func grant(g mig.Grant) string {
	if g.IsShare() {
		return fmt.Sprintf("share %d milli", g.Share.Milli)
	}
	if g.Created {
		return fmt.Sprintf("instance %v (create)", g.Instance)
	}
	return fmt.Sprintf("instance %v", g.Instance)
}
