package nvml_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/berthsched/berth/backends/nvml"
	"github.com/berthsched/berth/backends/nvml/nvmlmock"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
)

// Discovery of a whole box (devices, NVLink, common ancestors, MIG
// layouts) on the mocks: the NVML work of Open.
func BenchmarkDiscover(b *testing.B) {
	for _, name := range []string{"dgxh100", "dgxh100-mig"} {
		b.Run("box="+name, func(b *testing.B) {
			box, _ := nvmlmock.New("dgxh100")
			if name == "dgxh100-mig" {
				box.SetMIGMode(true)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := nvml.Discover(context.Background(), box, "box"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/discover")
		})
	}
}

// Bind to exit of a member running /bin/true: fork, exec, reap, exit
// record written, Finished queued.
func BenchmarkLaunch(b *testing.B) {
	box, _ := nvmlmock.New("dgxh100")
	exits := make(chan nvml.Exit, 1)
	be, err := nvml.Open(context.Background(), nvml.Config{NVML: box, NodeName: "box", RunDir: b.TempDir(), OnExit: func(e nvml.Exit) { exits <- e }})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	i := 0
	for b.Loop() {
		id := "j" + strconv.Itoa(i)
		i++
		if err := be.Submit(ctx, job(id, 1, 1), nvml.Command{Args: []string{"/bin/true"}}); err != nil {
			b.Fatal(err)
		}
		if err := be.BindMember(ctx, id, member(i%8)); err != nil {
			b.Fatal(err)
		}
		if e := <-exits; e.Reason != nvml.ReasonCompleted {
			b.Fatalf("%+v", e)
		}
		if _, err := be.Next(ctx, time.Now().Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/launch")
}

// A MIG change of one GPU (destroy 3, create 1, and back) on the mock,
// with the geometry checks and the layout re-reads around it.
func BenchmarkApplyMIG(b *testing.B) {
	box, _ := nvmlmock.New("dgxh100")
	box.SetMIGMode(true)
	be, err := nvml.Open(context.Background(), nvml.Config{NVML: box, NodeName: "box", RunDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	m, _ := mig.LookupModel("H100-80GB")
	empty := mig.EmptyLayout(m)
	three, _ := mig.ParseLayout(m, "3g.40gb@0 2g.20gb@4 1g.10gb@6")
	ctx := context.Background()
	for b.Loop() {
		if err := be.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "box", From: empty, To: three, Create: three.Instances()}); err != nil {
			b.Fatal(err)
		}
		if err := be.ApplyMIG(ctx, engine.MIGReconfiguration{Node: "box", From: three, To: empty, Destroy: three.Instances()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(2*b.N), "µs/change")
}
