module github.com/berthsched/berth/examples/kube-scheduler

go 1.26.0

replace (
	github.com/berthsched/berth => ../..
	github.com/berthsched/berth/backends/kube => ../../backends/kube
)
