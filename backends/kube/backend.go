package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/mig"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// PodGroupResource is the coscheduling plugin's PodGroup; its spec.minMember
// is the size of the gang of the pods labelled LabelPodGroup.
var PodGroupResource = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

const nodeIndex = "spec.nodeName"

// Backend is a backends.Backend on a Kubernetes API server. See the
// package documentation.
type Backend struct {
	cfg     Config
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	queues  map[string]bool
	factory informers.SharedInformerFactory
	podInf  cache.SharedIndexInformer
	nodeInf cache.SharedIndexInformer
	podList listerscorev1.PodLister
	nodeLst listerscorev1.NodeLister
	feed    *backends.Feed
	kick    chan struct{}
	status  *statusWriter
	bcast   record.EventBroadcaster
	cancel  context.CancelFunc
	life    context.Context // Start's, done at Close: bounds waits that outlive a call
	wg      sync.WaitGroup

	mu        sync.Mutex
	started   bool // Cluster and Running were read: changes go to the feed
	nodes     map[string]*toldNode
	spec      topo.Spec     // the engine's node list, in the engine's order
	cluster   *topo.Cluster // built from spec: GPU index -> node
	jobs      map[string]*job
	byUID     map[types.UID]string
	assumed   map[types.UID]assumedBind
	groupSize map[string]groupSize
	deleted   map[types.UID]bool // pods berth deleted that the informer may still list
	// gone: pods whose delete the informer has handed to podGone, kept
	// while a job holds them; true for those that had run to their end
	// (their last state was Succeeded or Failed on a node), which a sync
	// may never have listed so.
	gone     map[types.UID]bool
	devs     map[string]*nodeDevs
	logged   map[string]string
	svc      *svcState       // services and their replica pods (service.go)
	dra      *draState       // nil: DRA off (dra.go)
	prov     *provState      // nil: node autoscaling off (provision.go)
	launched map[string]bool // jobs LaunchJob created (or is creating), by ID
	lmu      sync.Mutex      // serialises LaunchJob and WithdrawJob
}

type toldNode struct {
	model  nodeModel
	state  topo.NodeState
	cause  string // why it is not Ready (nodeStatus), for pending pods' reasons
	labels map[string]string
	gone   bool
}

// job is a job the engine has been told of.
type job struct {
	id      string
	pods    []podRef
	foreign bool
	adopted bool
	// launched by LaunchJob; seen: all its pods were in the informer's
	// cache once (until then a missing pod is not an end).
	launched, seen bool
	assigned       map[string]int        // member key -> pod index
	bound          map[int]engine.Member // pod index -> member bound by us (or adopted)
	// nominated is the node Observe last nominated for each pod: a bind
	// on that node takes that pod.
	nominated []string
	// selectors are the nodeSelectors of its groups (nil: any node), to
	// say which nodes that are not Ready it could have used.
	selectors []map[string]string
	// neverFits: the engine refused its submission as never fitting the
	// cluster (engine.ErrNeverFits); retry: a node joined or became Ready
	// since, so it is submitted again (node autoscaling brings the nodes
	// such a gang waits for).
	neverFits, retry bool
}

type podRef struct {
	ns, name string
	uid      types.UID
	group    int
	d        demand
}

func (p podRef) key() string { return p.ns + "/" + p.name }

type assumedBind struct {
	node string
	d    demand
}

type groupSize struct {
	n       int
	created time.Time // the PodGroup's creationTimestamp
	checked time.Time
}

// nodeDevs mirrors the engine's device books of one node, only to name
// devices for adopted pods (see the package documentation: with the device
// plugin, the kubelet picks the physical GPUs; berth books counts).
type nodeDevs struct {
	gpu  []string                  // job holding each node-local GPU index
	inst map[mig.Instance][]string // MIG: job per GPU index holding the instance
}

// New returns a Backend that reads and writes through cs (and dyn for
// PodGroups; nil: gangs of pods labelled LabelPodGroup never form). Call
// Start before handing it to a Runner. Errors wrap ErrInvalidConfig.
func New(cs kubernetes.Interface, dyn dynamic.Interface, cfg Config) (*Backend, error) {
	if cs == nil {
		return nil, fmt.Errorf("%w: nil clientset", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provisioning.on() && dyn == nil {
		return nil, fmt.Errorf("%w: Provisioning needs a dynamic client (ProvisioningRequests)", ErrInvalidConfig)
	}
	c := cfg.withDefaults()
	b := &Backend{
		cfg: c, cs: cs, dyn: dyn, queues: map[string]bool{},
		feed: backends.NewFeed(), kick: make(chan struct{}, 1),
		nodes: map[string]*toldNode{}, jobs: map[string]*job{}, byUID: map[types.UID]string{},
		assumed: map[types.UID]assumedBind{}, groupSize: map[string]groupSize{}, deleted: map[types.UID]bool{},
		gone: map[types.UID]bool{},
		devs: map[string]*nodeDevs{}, logged: map[string]string{}, launched: map[string]bool{},
	}
	for _, q := range c.Queues.Queues {
		b.queues[q.Name] = true
	}
	for _, l := range c.Levels {
		b.spec.Levels = append(b.spec.Levels, l.Name)
	}
	return b, nil
}

// Start checks the identity's permissions (CheckAccess, unless
// Config.SkipAccessCheck), starts the pod and node informers, waits for
// their caches, and starts the status writer. The backend runs until ctx
// is done or Close is called.
func (b *Backend) Start(ctx context.Context) error {
	if !b.cfg.SkipAccessCheck {
		if err := CheckAccess(ctx, b.cs); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	b.cancel, b.life = cancel, ctx
	b.factory = informers.NewSharedInformerFactory(b.cs, b.cfg.ResyncPeriod)
	b.podInf = b.factory.Core().V1().Pods().Informer()
	b.nodeInf = b.factory.Core().V1().Nodes().Informer()
	if err := b.podInf.AddIndexers(cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		cancel()
		return fmt.Errorf("kube: pod index: %w", err)
	}
	b.podList = b.factory.Core().V1().Pods().Lister()
	b.nodeLst = b.factory.Core().V1().Nodes().Lister()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.poke() },
		UpdateFunc: func(any, any) { b.poke() },
		DeleteFunc: func(any) { b.poke() },
	}
	ph := h
	ph.DeleteFunc = func(obj any) {
		b.podGone(obj)
		b.poke()
	}
	if _, err := b.podInf.AddEventHandler(ph); err != nil {
		cancel()
		return fmt.Errorf("kube: pod handler: %w", err)
	}
	if _, err := b.nodeInf.AddEventHandler(h); err != nil {
		cancel()
		return fmt.Errorf("kube: node handler: %w", err)
	}
	if err := b.startDRA(ctx, h); err != nil {
		cancel()
		return err
	}
	b.factory.Start(ctx.Done())
	for typ, ok := range b.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			b.factory.Shutdown()
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("kube: %v informer did not sync", typ)
		}
	}
	if err := b.startProvisioning(ctx, h); err != nil {
		cancel()
		b.factory.Shutdown()
		return err
	}
	b.bcast = record.NewBroadcaster(record.WithContext(ctx))
	b.bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: b.cs.CoreV1().Events("")})
	rec := b.bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: b.cfg.SchedulerName})
	b.status = newStatusWriter(b.cs, rec, b.cfg.Logf, b.isBound)
	for range b.cfg.StatusWorkers {
		b.wg.Go(func() { b.status.work(ctx) })
	}
	b.wg.Go(func() { b.loop(ctx) })
	return nil
}

// Close stops the informers, the status writer and the event stream
// (Next then returns backends.ErrClosed), and waits for them.
func (b *Backend) Close() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	b.wg.Wait()
	b.factory.Shutdown()
	if b.prov != nil {
		b.prov.factory.Shutdown()
	}
	b.bcast.Shutdown()
	b.feed.Close()
}

func (b *Backend) poke() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *Backend) logf(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.mu.Lock()
	same := b.logged[key] == msg
	b.logged[key] = msg
	b.mu.Unlock()
	if !same {
		b.cfg.Logf("%s", msg)
	}
}

// loop turns informer changes into engine events once Running was read.
func (b *Backend) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		}
		b.mu.Lock()
		started := b.started
		b.mu.Unlock()
		if !started {
			continue
		}
		evs := b.syncNodes(time.Now())
		adopts, cancels, submits := b.syncPods(ctx, time.Now())
		cancels = append(cancels, b.syncReplicas(ctx, time.Now())...)
		// Cancellations first: an adoption may reuse the ID of a job
		// that ended in the same batch.
		evs = append(evs, cancels...)
		evs = append(evs, b.adoptEvents(adopts, time.Now())...)
		evs = append(evs, submits...)
		if len(evs) > 0 {
			if err := b.feed.Push(evs...); err != nil {
				return
			}
		}
		b.reconcileProvisioning(ctx, time.Now())
	}
}

// adoptEvents turns adoptions found while running into events. The
// engine books running jobs only on ready nodes, so a cordoned or
// draining node is made ready for the adoption and put back right after
// (the Runner steps a batch of events before it runs a cycle).
func (b *Backend) adoptEvents(adopts []backends.RunningJob, now time.Time) []engine.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	var evs []engine.Event
	for _, a := range adopts {
		var flip []string
		for _, m := range a.Members {
			if t := b.nodes[m.Node]; t != nil && t.state != topo.Ready && !slices.Contains(flip, m.Node) {
				flip = append(flip, m.Node)
			}
		}
		for _, n := range flip {
			evs = append(evs, engine.NodeChanged(now, n, topo.Ready, b.nodes[n].labels))
		}
		evs = append(evs, engine.Adopted(now, a.Job, a.Members))
		for _, n := range flip {
			evs = append(evs, engine.NodeChanged(now, n, b.nodes[n].state, b.nodes[n].labels))
		}
	}
	return evs
}

// ---------------------------------------------------------------- inventory

// Cluster returns the GPU nodes the node informer holds: one topo.NodeSpec
// per node with nvidia.com/gpu or MIG capacity (see the package
// documentation). Nodes that cannot be modelled are left out and logged.
func (b *Backend) Cluster(ctx context.Context) (topo.Spec, error) {
	if err := ctx.Err(); err != nil {
		return topo.Spec{}, err
	}
	if b.nodeLst == nil {
		return topo.Spec{}, ErrNotStarted
	}
	b.syncNodes(time.Now())
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.spec
	out.Levels = slices.Clone(b.spec.Levels)
	out.Nodes = slices.Clone(b.spec.Nodes)
	return out, nil
}

// Running returns the pods already bound, as jobs to adopt: berth's pods
// by gang, other schedulers' GPU pods one job each (never preempted).
// From then on changes reach the engine through Next.
func (b *Backend) Running(ctx context.Context) ([]backends.RunningJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b.podList == nil {
		return nil, ErrNotStarted
	}
	adopts, cancels, submits := b.syncPods(ctx, time.Now())
	adopts = append(adopts, b.adoptReplicas(time.Now())...)
	evs := append(cancels, submits...)
	b.mu.Lock()
	b.started = true
	b.mu.Unlock()
	if len(evs) > 0 {
		if err := b.feed.Push(evs...); err != nil {
			return nil, err
		}
	}
	b.poke()
	return adopts, nil
}

// Next returns the changes seen since the last call. See backends.Events.
func (b *Backend) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	return b.feed.Next(ctx, wake)
}

// syncNodes compares the node informer with what the engine was told and
// returns the events that bring the engine up to date.
func (b *Backend) syncNodes(now time.Time) []engine.Event {
	list, err := b.nodeLst.List(labels.Everything())
	if err != nil {
		b.logf("nodes", "kube: listing nodes: %v", err)
		return nil
	}
	slices.SortFunc(list, func(x, y *corev1.Node) int { return compareStrings(x.Name, y.Name) })
	models := map[string]nodeModel{}
	for _, n := range list {
		nm, ok, err := b.modelNode(n)
		if err != nil {
			b.logf("node/"+n.Name, "kube: node left out: %v", err)
			continue
		}
		if ok {
			models[n.Name] = nm
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var evs []engine.Event
	added, grew := false, false
	for _, n := range list {
		nm, ok := models[n.Name]
		if !ok {
			continue
		}
		t := b.nodes[n.Name]
		switch {
		case t == nil:
			sp := nm.spec
			if !b.started && sp.State != topo.Down {
				// The engine adopts running pods only on ready nodes:
				// the node's real state follows once Running was read.
				sp.State = topo.Ready
			}
			b.nodes[n.Name] = &toldNode{model: nm, state: sp.State, cause: nm.cause, labels: nm.spec.Labels}
			b.spec.Nodes = append(b.spec.Nodes, sp)
			b.devs[n.Name] = newNodeDevs(nm.spec)
			added, grew = true, grew || sp.State == topo.Ready
			if b.started {
				evs = append(evs, engine.NodeAdded(now, sp))
			}
			continue
		case !maps.Equal(t.model.capacity, nm.capacity) || t.model.spec.GPUModel != nm.spec.GPUModel ||
			!slices.Equal(t.model.spec.Domains, nm.spec.Domains):
			b.cfg.Logf("kube: node %s changed its GPUs or topology; berth keeps the old model until it restarts", n.Name)
		}
		t.cause = nm.cause
		if t.gone || t.state != nm.spec.State || !maps.Equal(t.labels, nm.spec.Labels) {
			grew = grew || nm.spec.State == topo.Ready && (t.gone || t.state != topo.Ready)
			t.gone, t.state, t.labels = false, nm.spec.State, nm.spec.Labels
			if b.started {
				evs = append(evs, engine.NodeChanged(now, n.Name, nm.spec.State, nm.spec.Labels))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.nodes)) {
		t := b.nodes[name]
		if _, ok := models[name]; !ok && !t.gone {
			t.gone, t.state, t.cause = true, topo.Down, "deleted"
			if b.started {
				evs = append(evs, engine.NodeFailed(now, name))
			}
		}
	}
	if added {
		b.rebuildCluster()
	}
	if grew && b.started {
		for _, j := range b.jobs {
			j.retry = j.retry || j.neverFits
		}
	}
	return evs
}

func (b *Backend) rebuildCluster() {
	c, err := topo.New(b.spec)
	if err != nil {
		b.cfg.Logf("kube: cluster model: %v", err)
		b.cluster = nil
		return
	}
	b.cluster = c
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func newNodeDevs(sp topo.NodeSpec) *nodeDevs {
	d := &nodeDevs{gpu: make([]string, sp.GPUs)}
	if sp.MIG {
		d.inst = map[mig.Instance][]string{}
		if m, err := mig.LookupModel(sp.GPUModel); err == nil {
			if l, err := mig.ParseLayout(m, sp.MIGLayout); err == nil {
				for _, in := range l.Instances() {
					d.inst[in] = make([]string, sp.GPUs)
				}
			}
		}
	}
	return d
}

// take books a member for job on the mirror: whole GPUs (the lowest free
// indices) or one MIG instance of profile. ok is false when none is free.
func (d *nodeDevs) take(jobID string, dm demand) (engine.Member, bool) {
	var m engine.Member
	if dm.mig == "" {
		for g := range d.gpu {
			if len(m.GPUs) == dm.gpus {
				break
			}
			if d.gpu[g] == "" {
				m.GPUs = append(m.GPUs, g)
			}
		}
		if len(m.GPUs) < dm.gpus {
			return m, false
		}
		for _, g := range m.GPUs {
			d.gpu[g] = jobID
		}
		return m, true
	}
	ins := slices.SortedFunc(maps.Keys(d.inst), func(a, b mig.Instance) int { return int(a.Start) - int(b.Start) })
	for g := range d.gpu {
		for _, in := range ins {
			if in.Profile.Name() == dm.mig && d.inst[in][g] == "" {
				d.inst[in][g] = jobID
				return engine.Member{GPUs: []int{g}, Fractional: true, Instance: in}, true
			}
		}
	}
	return m, false
}

// takeAt books a member for job on the mirror at the indices v names (an
// AnnotationGPUs value: what berth booked when it bound the pod), when
// they are what dm asks and free. ok is false otherwise, and nothing is
// booked.
func (d *nodeDevs) takeAt(jobID string, dm demand, v string) (engine.Member, bool) {
	if v == "" {
		return engine.Member{}, false
	}
	if dm.mig == "" {
		var m engine.Member
		for f := range strings.SplitSeq(v, ",") {
			g, err := strconv.Atoi(f)
			if err != nil || g < 0 || g >= len(d.gpu) || d.gpu[g] != "" || slices.Contains(m.GPUs, g) {
				return engine.Member{}, false
			}
			m.GPUs = append(m.GPUs, g)
		}
		if len(m.GPUs) != dm.gpus {
			return engine.Member{}, false
		}
		for _, g := range m.GPUs {
			d.gpu[g] = jobID
		}
		return m, true
	}
	gs, ss, ok := strings.Cut(v, "/")
	g, gerr := strconv.Atoi(gs)
	start, serr := strconv.Atoi(ss)
	if !ok || gerr != nil || serr != nil || g < 0 || g >= len(d.gpu) {
		return engine.Member{}, false
	}
	for in, h := range d.inst {
		if in.Profile.Name() == dm.mig && int(in.Start) == start && h[g] == "" {
			h[g] = jobID
			return engine.Member{GPUs: []int{g}, Fractional: true, Instance: in}, true
		}
	}
	return engine.Member{}, false
}

// adoptAt books a member for an adopted pod: on the indices its
// AnnotationGPUs names when they are free (berth bound it), else on the
// lowest free ones (another scheduler's pod, or one bound before berth
// wrote the annotation).
func (d *nodeDevs) adoptAt(jobID string, dm demand, p *corev1.Pod) (engine.Member, bool) {
	if m, ok := d.takeAt(jobID, dm, p.Annotations[AnnotationGPUs]); ok {
		return m, true
	}
	return d.take(jobID, dm)
}

// gpusAnnotation is the AnnotationGPUs value of member m ("" when m
// holds no GPU).
func gpusAnnotation(m engine.Member) string {
	if m.Fractional {
		if len(m.GPUs) != 1 || m.Share.ID != 0 {
			return ""
		}
		return strconv.Itoa(m.GPUs[0]) + "/" + strconv.Itoa(int(m.Instance.Start))
	}
	parts := make([]string, len(m.GPUs))
	for i, g := range m.GPUs {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}

// book records a member the engine chose.
func (d *nodeDevs) book(jobID string, m engine.Member) {
	if m.Fractional {
		if h, ok := d.inst[m.Instance]; ok && len(m.GPUs) == 1 && m.GPUs[0] < len(h) {
			h[m.GPUs[0]] = jobID
		}
		return
	}
	for _, g := range m.GPUs {
		if g < len(d.gpu) {
			d.gpu[g] = jobID
		}
	}
}

// free gives back what jobID holds, or only member m when m is not nil.
func (d *nodeDevs) free(jobID string, m *engine.Member) {
	if m != nil && m.Fractional {
		if h, ok := d.inst[m.Instance]; ok && len(m.GPUs) == 1 && m.GPUs[0] < len(h) && h[m.GPUs[0]] == jobID {
			h[m.GPUs[0]] = ""
		}
		return
	}
	for g, h := range d.gpu {
		if h == jobID && (m == nil || slices.Contains(m.GPUs, g)) {
			d.gpu[g] = ""
		}
	}
	if m == nil {
		for _, h := range d.inst {
			for g := range h {
				if h[g] == jobID {
					h[g] = ""
				}
			}
		}
	}
}

// ---------------------------------------------------------------- pods

// pendingGang is a gang of berth's pods waiting to be submitted.
type pendingGang struct {
	group   string
	size    int
	created time.Time // the PodGroup's creation (coscheduling gangs)
	err     error
	pods    []*corev1.Pod
}

// syncPods compares the pod informer with the jobs the engine knows and
// returns the adoptions, cancellations and submissions that bring the
// engine up to date.
func (b *Backend) syncPods(ctx context.Context, now time.Time) (adopts []backends.RunningJob, cancels, submits []engine.Event) {
	list, err := b.podList.List(labels.Everything())
	if err != nil {
		b.logf("pods", "kube: listing pods: %v", err)
		return nil, nil, nil
	}
	sortPods(list)
	b.mu.Lock()
	deleted := maps.Clone(b.deleted)
	b.mu.Unlock()
	live := make(map[types.UID]*corev1.Pod, len(list))
	inCache := make(map[types.UID]bool, len(list))
	boundBy := map[string][]*corev1.Pod{}
	var boundOrder []string
	pending := map[string]*pendingGang{}
	var pendingOrder []string
	ran := map[types.UID]bool{} // pods that ran to their end (Succeeded or Failed)
	for _, p := range list {
		inCache[p.UID] = true
		if isReplicaPod(p) {
			continue // a service's replica: service.go
		}
		if !podLive(p) && p.Spec.NodeName != "" && !deleted[p.UID] {
			ran[p.UID] = true
		}
		if !podLive(p) || deleted[p.UID] {
			continue // ended, or deleted by berth and not yet gone from the cache
		}
		live[p.UID] = p
		ours := p.Spec.SchedulerName == b.cfg.SchedulerName
		if p.Spec.NodeName != "" {
			if !ours {
				d, err := podDemand(p)
				if err != nil || d.gpus == 0 && d.mig == "" {
					continue
				}
			}
			id := boundKey(p, b.cfg.SchedulerName)
			if _, ok := boundBy[id]; !ok {
				boundOrder = append(boundOrder, id)
			}
			boundBy[id] = append(boundBy[id], p)
			continue
		}
		if !ours || p.DeletionTimestamp != nil {
			continue
		}
		g, size, gerr := groupOf(p)
		id := jobIDOf(p, g)
		pg := pending[id]
		if pg == nil {
			pg = &pendingGang{group: g, size: size, err: gerr}
			pending[id] = pg
			pendingOrder = append(pendingOrder, id)
		}
		pg.pods = append(pg.pods, p)
	}
	// Sizes of coscheduling PodGroups, read outside the lock.
	for _, id := range pendingOrder {
		pg := pending[id]
		if pg.err == nil && pg.size == 0 {
			pg.size, pg.created, pg.err = b.podGroupSize(ctx, pg.pods[0].Namespace, pg.group, now)
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	// Pods deleted by a rollback since the list was taken are gone too.
	for uid := range b.deleted {
		if p := live[uid]; p != nil {
			delete(live, uid)
			if id := boundKey(p, b.cfg.SchedulerName); boundBy[id] != nil {
				boundBy[id] = slices.DeleteFunc(boundBy[id], func(q *corev1.Pod) bool { return q.UID == uid })
			}
		}
	}
	// Jobs that ended or broke up.
	for _, id := range slices.Sorted(maps.Keys(b.jobs)) {
		j := b.jobs[id]
		if j.launched && !j.seen {
			if !slices.ContainsFunc(j.pods, func(pr podRef) bool { return !inCache[pr.uid] }) {
				j.seen = true
			}
			continue // created after the list was taken
		}
		// A pod gone from the informer's cache whose delete podGone has
		// not seen yet: whether it ran to its end is not known yet (the
		// cache drops a pod before its handlers hear of it), so the job
		// waits for the next sync, which podGone asks for.
		if slices.ContainsFunc(j.pods, func(pr podRef) bool {
			_, noted := b.gone[pr.uid]
			return !inCache[pr.uid] && !noted && !b.deleted[pr.uid]
		}) {
			continue
		}
		alive, broken := 0, false
		for i, pr := range j.pods {
			p := live[pr.uid]
			if p == nil {
				broken = true
				continue
			}
			alive++
			_, ours := j.bound[i]
			_, inFlight := b.assumed[pr.uid]
			if !ours && !inFlight && p.Spec.NodeName != "" && !b.recordLateLocked(j, i, p) {
				broken = true // bound by someone else
			}
		}
		if alive == 0 || (broken && len(j.bound) == 0 && !j.adopted) {
			// A gang every pod of which ran to its end (the kubelet set
			// Succeeded or Failed) finished; one whose pods were deleted
			// or never ran was cancelled.
			ev := engine.Cancelled(now, id)
			if alive == 0 && len(j.pods) > 0 && !slices.ContainsFunc(j.pods, func(pr podRef) bool { return !ran[pr.uid] && !b.gone[pr.uid] }) {
				ev = engine.Finished(now, id)
			}
			cancels = append(cancels, ev)
			b.forget(j)
		}
	}
	// Bound pods the engine does not know: adopt them.
	for _, id := range boundOrder {
		var fresh []*corev1.Pod
		for _, p := range boundBy[id] {
			t := b.nodes[p.Spec.NodeName]
			if t == nil || t.gone || t.state == topo.Down {
				continue // not a berth node, or down: nothing to book there now
			}
			if _, known := b.byUID[p.UID]; !known {
				fresh = append(fresh, p)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		if _, told := b.jobs[id]; told {
			// A pod of a known gang bound by someone else: adopt it alone.
			for _, p := range fresh {
				if rj, ok := b.adopt(jobIDOf(p, "")+"/adopted", []*corev1.Pod{p}, now); ok {
					adopts = append(adopts, rj)
				}
			}
			continue
		}
		if rj, ok := b.adopt(id, fresh, now); ok {
			adopts = append(adopts, rj)
		}
	}
	// Complete gangs of pending pods: submit them.
	for _, id := range pendingOrder {
		pg := pending[id]
		if j := b.jobs[id]; j != nil && j.retry {
			// Refused as never fitting, and the cluster grew since: the
			// same job again (the engine does not know it).
			j.retry, j.neverFits = false, false
			if !j.launched && len(j.bound) == 0 && len(pg.pods) == len(j.pods) && pg.err == nil {
				if qj, _, err := b.buildJob(id, pg.pods, true, submitTime(pg.pods, pg.created, now)); err == nil {
					submits = append(submits, engine.Submitted(now, qj))
				}
			}
			continue
		}
		// Pods already members of a job the engine knows (a gang being
		// bound right now, or waiting) are not new work.
		pg.pods = slices.DeleteFunc(pg.pods, func(p *corev1.Pod) bool {
			_, known := b.byUID[p.UID]
			return known || b.launched[p.Labels[LabelJob]]
		})
		if len(pg.pods) == 0 {
			continue
		}
		jobID, size := id, pg.size
		if bound := len(boundBy[id]); bound > 0 && pg.group != "" {
			// The rest of a gang partly bound by an earlier scheduler
			// (it failed over mid-bind): place the rest as its own gang.
			jobID, size = id+"/rest", max(1, size-bound)
		}
		if j := b.jobs[jobID]; j != nil {
			continue
		}
		if pg.err != nil {
			b.status.waiting(pg.pods, "Invalid", "berth: "+pg.err.Error())
			continue
		}
		if len(pg.pods) < size {
			b.status.waiting(pg.pods, "WaitingForGang",
				fmt.Sprintf("berth: gang %s has %d of its %d pods", pg.group, len(pg.pods), size))
			continue
		}
		qj, groups, err := b.buildJob(jobID, pg.pods, true, submitTime(pg.pods, pg.created, now))
		if err != nil {
			b.status.waiting(pg.pods, "Invalid", "berth: "+err.Error())
			continue
		}
		j := &job{id: jobID, assigned: map[string]int{}, bound: map[int]engine.Member{}}
		for _, g := range qj.Request.Groups {
			j.selectors = append(j.selectors, g.Selector)
		}
		for i, p := range pg.pods {
			d, _ := podDemand(p)
			j.pods = append(j.pods, podRef{ns: p.Namespace, name: p.Name, uid: p.UID, group: groups[i], d: d})
			b.byUID[p.UID] = jobID
		}
		b.jobs[jobID] = j
		submits = append(submits, engine.Submitted(now, qj))
	}
	b.status.prune(func(key string) bool {
		ns, name, _ := strings.Cut(key, "/")
		p, err := b.podList.Pods(ns).Get(name)
		return err == nil && p.Spec.NodeName == "" && podLive(p)
	})
	for uid := range b.deleted {
		if !inCache[uid] {
			delete(b.deleted, uid)
		}
	}
	// Deletes noted of pods that no job holds (any more).
	if len(b.gone) > 0 {
		held := map[types.UID]bool{}
		for _, j := range b.jobs {
			for _, pr := range j.pods {
				held[pr.uid] = true
			}
		}
		for uid := range b.gone {
			if !held[uid] {
				delete(b.gone, uid)
			}
		}
	}
	// Assumed binds the informer has caught up with (and BindMember has
	// recorded), or whose pods are gone.
	for uid, a := range b.assumed {
		if p := live[uid]; p == nil || p.Spec.NodeName == a.node && b.boundLocked(uid) {
			delete(b.assumed, uid)
		}
	}
	return adopts, cancels, submits
}

// recordLateLocked records as bound pod i of j, which the informer shows
// on a node with no bind of berth's recorded and no call in flight: a
// Binding of berth's that the API server committed after its call
// answered an error (the client gave up). Only berth binds pods of its
// scheduler, so the bind is berth's own: the job keeps the pod (its
// member is read from the node and AnnotationGPUs), RunningNow lists it,
// and the Runner adopts or stops it. False for another scheduler's pod, a
// foreign job, or a node berth cannot book it on. Caller holds mu.
func (b *Backend) recordLateLocked(j *job, i int, p *corev1.Pod) bool {
	if j.foreign || p.Spec.SchedulerName != b.cfg.SchedulerName {
		return false
	}
	t, devs := b.nodes[p.Spec.NodeName], b.devs[p.Spec.NodeName]
	if t == nil || t.gone || devs == nil {
		return false
	}
	pr := j.pods[i]
	m, ok := devs.adoptAt(j.id, pr.d, p)
	if !ok {
		return false
	}
	m.Node, m.Group = p.Spec.NodeName, pr.group
	j.bound[i] = m
	j.assigned[memberKey(m)] = i
	b.cfg.Logf("kube: pod %s of %s is bound on %s with no bind of berth's recorded (a Binding committed after its call gave up): recorded", pr.key(), j.id, m.Node)
	return true
}

// NodeState says what berth believes of a node: its state, and false
// when the node is not (or no longer) one of berth's nodes.
func (b *Backend) NodeState(name string) (topo.NodeState, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.nodes[name]
	if t == nil || t.gone {
		return topo.Down, false
	}
	return t.state, true
}

// boundKey is the job a bound pod is adopted into: its gang for berth's
// pods, the pod alone for other schedulers'.
func boundKey(p *corev1.Pod, scheduler string) string {
	if p.Spec.SchedulerName == scheduler {
		g, _, _ := groupOf(p)
		return jobIDOf(p, g)
	}
	return jobIDOf(p, "")
}

// adopt books bound pods as one running job. Caller holds mu.
func (b *Backend) adopt(id string, pods []*corev1.Pod, now time.Time) (backends.RunningJob, bool) {
	ours := pods[0].Spec.SchedulerName == b.cfg.SchedulerName
	start := now
	if st := pods[0].Status.StartTime; st != nil && st.Time.Before(now) {
		start = st.Time
	}
	qj, groups, err := b.buildJob(id, pods, ours, submitTime(pods, time.Time{}, start))
	if err != nil {
		b.cfg.Logf("kube: cannot adopt %s: %v", id, err)
		return backends.RunningJob{}, false
	}
	j := &job{id: id, foreign: !ours, adopted: true, assigned: map[string]int{}, bound: map[int]engine.Member{}}
	var members []engine.Member
	for i, p := range pods {
		d := b.memberDemand(p)
		t := b.nodes[p.Spec.NodeName]
		devs := b.devs[p.Spec.NodeName]
		if t == nil || t.gone || devs == nil {
			b.cfg.Logf("kube: pod %s on %s, which is not a GPU node berth knows: not booked", podKey(p), p.Spec.NodeName)
			continue
		}
		m, ok := devs.adoptAt(id, d, p)
		if !ok {
			b.cfg.Logf("kube: pod %s on %s asks for %v, which the node does not have free: not booked", podKey(p), p.Spec.NodeName, d)
			continue
		}
		m.Node, m.Group = p.Spec.NodeName, groups[i]
		j.pods = append(j.pods, podRef{ns: p.Namespace, name: p.Name, uid: p.UID, group: groups[i], d: d})
		j.bound[len(j.pods)-1] = m
		if ours {
			// UnbindMember finds the pod by its member: the Runner stops
			// an adopted gang it cannot book by unbinding its members.
			j.assigned[memberKey(m)] = len(j.pods) - 1
		}
		members = append(members, m)
		b.byUID[p.UID] = id
	}
	if len(members) < len(pods) {
		for _, m := range members {
			b.devs[m.Node].free(id, &m)
		}
		for _, pr := range j.pods {
			delete(b.byUID, pr.uid)
		}
		return backends.RunningJob{}, false
	}
	b.jobs[id] = j
	return backends.RunningJob{Job: qj, Members: members, Start: start}, true
}

// podGone notes the delete of a pod, and whether the pod had run to its
// end (syncPods forgets the note once no job holds the pod): a gang whose
// pods all succeeded and were then deleted at once (a preemption's
// eviction of a pod that had just completed deletes it without a grace
// period, as does a TTL controller) finished, though no sync may have
// listed its pods as ended.
func (b *Backend) podGone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gone[p.UID] = !podLive(p) && p.Spec.NodeName != "" && !b.deleted[p.UID]
}

// forget drops a job the engine is told has ended. Caller holds mu.
func (b *Backend) forget(j *job) {
	for _, pr := range j.pods {
		if b.byUID[pr.uid] == j.id {
			delete(b.byUID, pr.uid)
		}
		delete(b.assumed, pr.uid)
	}
	for _, m := range j.bound {
		if d := b.devs[m.Node]; d != nil {
			d.free(j.id, nil)
		}
	}
	delete(b.jobs, j.id)
	if j.launched {
		delete(b.launched, j.id)
	}
}

// podGroupSize reads spec.minMember and the creation time of a
// coscheduling PodGroup, caching them (a missing PodGroup is asked again
// after 10 s).
func (b *Backend) podGroupSize(ctx context.Context, ns, name string, now time.Time) (int, time.Time, error) {
	key := ns + "/" + name
	b.mu.Lock()
	gs, ok := b.groupSize[key]
	b.mu.Unlock()
	if ok && (gs.n > 0 || now.Sub(gs.checked) < 10*time.Second) {
		if gs.n == 0 {
			return 0, time.Time{}, fmt.Errorf("PodGroup %s not found", key)
		}
		return gs.n, gs.created, nil
	}
	if b.dyn == nil {
		return 0, time.Time{}, fmt.Errorf("PodGroup %s: no dynamic client to read it", key)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u, err := b.dyn.Resource(PodGroupResource).Namespace(ns).Get(rctx, name, metav1.GetOptions{})
	n := int64(0)
	var created time.Time
	if err == nil {
		created = u.GetCreationTimestamp().Time
		v, found, ferr := unstructuredInt(u.Object, "spec", "minMember")
		switch {
		case ferr != nil || !found || v < 1:
			err = fmt.Errorf("PodGroup %s has no positive spec.minMember", key)
		default:
			n = v
		}
	} else if !apierrors.IsNotFound(err) {
		return 0, time.Time{}, fmt.Errorf("PodGroup %s: %w", key, err)
	}
	b.mu.Lock()
	b.groupSize[key] = groupSize{n: int(n), created: created, checked: now}
	b.mu.Unlock()
	if n == 0 {
		if err == nil {
			err = fmt.Errorf("PodGroup %s not found", key)
		}
		return 0, time.Time{}, err
	}
	return int(n), created, nil
}

// submitTime is when a job was submitted, as the API server recorded it:
// the creation of its coscheduling PodGroup (created, when not zero),
// else that of its earliest pod; never after now (an API server clock
// ahead of berth's). Taking it from the objects, not from when berth
// first saw them, keeps FIFO order, aging and fair share across a
// restart or a failover: a new leader submits every pending job again.
// creationTimestamp has whole seconds: jobs of the same second are
// ordered by ID, the same on every leader.
func submitTime(pods []*corev1.Pod, created, now time.Time) time.Time {
	t := created
	if t.IsZero() {
		for _, p := range pods {
			if c := p.CreationTimestamp.Time; !c.IsZero() && (t.IsZero() || c.Before(t)) {
				t = c
			}
		}
	}
	if t.IsZero() || t.After(now) {
		return now
	}
	return t
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		if cur, ok = m[p]; !ok {
			return 0, false, nil
		}
	}
	switch v := cur.(type) {
	case int64:
		return v, true, nil
	case float64:
		return int64(v), true, nil
	case int:
		return int64(v), true, nil
	}
	return 0, true, errors.New("not an integer")
}

// isBound says whether berth bound (or saw bound) the pod: its status
// is then the API server's, not berth's.
func (b *Backend) isBound(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.assumed[uid]; ok {
		return true
	}
	return b.boundLocked(uid)
}

// boundLocked: the pod is a member that berth bound or adopted. Caller
// holds mu.
func (b *Backend) boundLocked(uid types.UID) bool {
	j := b.jobs[b.byUID[uid]]
	if j == nil {
		return false
	}
	for i, pr := range j.pods {
		if pr.uid == uid {
			_, ok := j.bound[i]
			return ok
		}
	}
	return false
}

// OnStepError is for backends.RunnerConfig.OnStepError: an event the
// engine rejects because the backend's view and the engine's differ for a
// moment (a job cancelled that the engine already dropped, a submission or
// adoption it refuses) is logged and skipped, and the pods of a refused
// submission get a PodScheduled=False condition saying why; a node event
// it refuses is logged and skipped; anything else stops the Runner.
func (b *Backend) OnStepError(ev engine.Event, err error) error {
	switch {
	case (ev.Kind == engine.EventJobCancelled || ev.Kind == engine.EventJobFinished) && errors.Is(err, engine.ErrUnknownJob):
		return nil
	case ev.Kind == engine.EventJobSubmitted || ev.Kind == engine.EventJobAdopted:
		id := ""
		if ev.Job != nil {
			id = ev.Job.ID
		}
		b.cfg.Logf("kube: engine refused %v of %s: %v", ev.Kind, id, err)
		b.mu.Lock()
		var pods []*corev1.Pod
		if j := b.jobs[id]; j != nil && ev.Kind == engine.EventJobSubmitted {
			j.neverFits = errors.Is(err, engine.ErrNeverFits)
			for _, pr := range j.pods {
				pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pr.ns, Name: pr.name, UID: pr.uid}})
			}
		}
		b.mu.Unlock()
		b.status.waiting(pods, "Invalid", "berth: "+err.Error())
		return nil
	case ev.Kind == engine.EventNodeAdded || ev.Kind == engine.EventNodeChanged || ev.Kind == engine.EventNodeFailed:
		// A node the engine cannot take (it failed validation, or was
		// never added): the engine keeps its old view of it.
		b.cfg.Logf("kube: engine refused %v: %v", ev.Kind, err)
		return nil
	case errors.Is(err, engine.ErrTimeBackwards):
		return nil
	}
	return err
}

// RunnerConfig returns a Runner config for this backend: ecfg with the
// backend's queue tree (when ecfg has none), MIG planning off (the MIG
// manager, not the scheduler, lays out MIG on Kubernetes), EASY backfill
// (reservations and estimated starts) unless ecfg sets a mode, a bind
// retry backoff of 2 s unless set, and the backend's Observe and
// OnStepError.
func (b *Backend) RunnerConfig(ecfg engine.Config) backends.RunnerConfig {
	if len(ecfg.Queues.Queues) == 0 {
		ecfg.Queues = b.cfg.Queues
	}
	ecfg.MIG.Disabled = true
	if ecfg.Backfill.Mode == engine.BackfillNone {
		ecfg.Backfill.Mode = engine.BackfillEASY
	}
	if ecfg.BindRetryBackoff == 0 {
		ecfg.BindRetryBackoff = 2 * time.Second
	}
	if ecfg.Policy == nil {
		ecfg.Policy = queue.StrictPriority()
	}
	return backends.RunnerConfig{
		Engine: ecfg, Backend: b, Observe: b.Observe, OnStepError: b.OnStepError,
		TickInterval: 30 * time.Second,
	}
}

var _ backends.Backend = (*Backend)(nil)
