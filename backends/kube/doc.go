// Package kube makes berth a Kubernetes scheduler: a backends.Backend on a
// real kube-apiserver, for the pods whose spec.schedulerName is berth's.
// It lives in its own Go module so that importing berth's core never pulls
// client-go.
//
// # What it reads
//
// Informers on pods and nodes. Every node with nvidia.com/gpu or
// nvidia.com/mig-<profile> allocatable is a berth node: its GPU model from
// nvidia.com/gpu.product, its topology from node labels (Config.Levels;
// by default topology.kubernetes.io/zone > berth.dev/block > berth.dev/rack
// > nvidia.com/gpu.clique), Down when its Ready condition is not True,
// Cordoned when unschedulable or tainted NoSchedule/NoExecute. Bound live
// pods are running jobs: berth's own by gang, other schedulers' GPU pods
// one job each (never preempted), adopted at start and whenever they
// appear.
//
// Pending pods with berth's scheduler name are the pending work. A gang is
// the pods labelled scheduling.x-k8s.io/pod-group=<g> (size: the
// coscheduling PodGroup's spec.minMember) or carrying Kueue's
// kueue.x-k8s.io/pod-group-name and pod-group-total-count; a gang is
// submitted once that many pods are pending, and pods of one shape (GPUs
// or MIG profile, nodeSelector) form one gang.Group. Priority is
// spec.priority (the PriorityClass); the submit time the creation of the
// PodGroup, else of the earliest pod (so a new leader keeps the queue's
// order); the queue the berth.dev/queue label,
// else the namespace when it is a leaf queue, else Config.DefaultQueue;
// Kueue's podset-required-topology and podset-preferred-topology
// annotations name levels (both are honoured together).
//
// # What it writes
//
// Binds go through the pods/binding subresource, member by member (the
// Runner binds a gang's members in parallel); a gang with a member that
// fails is rolled back by deleting the pods already bound (spec.nodeName
// cannot be unset). Preemption evicts through the Eviction API, so
// PodDisruptionBudgets apply: every eviction of the victim is first tried
// as a dry run, and one refusal refuses the preemption. Observe writes
// PodScheduled=False with berth's reason and estimated start (a capacity
// reason names the tainted, cordoned or not-ready nodes it left out), and
// status.nominatedNodeName for the pods of a job holding a reservation,
// plus a FailedScheduling Event. Run adds leader election on a Lease; a
// new leader rebuilds everything from the API server.
//
// # Devices
//
// With the NVIDIA device plugin the kubelet, not the scheduler, picks the
// GPU indices a pod gets, and the API server never says which. berth
// therefore books counts per node: the engine's GPU indices are its own
// books, and BindMember checks, before every bind, that the node's
// allocatable count minus the GPUs of every live pod bound there (binds in
// flight included) covers the pod. The engine never books more GPUs on a
// node than it has, the kubelet never hands out a device twice, and the
// two counts agree, so no GPU is booked twice; what berth cannot promise
// is which GPUs of a node (NVLink islands inside a node are not used).
// The Binding writes the engine's indices on the pod (AnnotationGPUs), and
// a restarted backend adopts berth's pods on them, so that a restored
// engine's books and the backend's report agree.
// MIG nodes (mixed strategy) are modelled with the same layout on every GPU
// (nvidia.com/gpu.count GPUs); berth never reconfigures MIG.
//
// With Config.DRA set, berth also allocates ResourceClaims (dynamic
// resource allocation, resource.k8s.io/v1) for the GPUs of one driver: a
// node whose GPUs the driver's ResourceSlices publish is modelled from
// them (count, product, NVLink islands), a pod's claims are its demand, and
// before each bind berth writes the claim's status.allocation with the
// exact devices the engine chose and reserves it for the pod; it releases
// the claim when the pod ends or is deleted. Pods without claims keep the
// device-plugin path. See docs/backends/kube.md.
//
// # Services
//
// Services (engine.Service) run with replicas as pods: SetService (with a
// pod template), ScaleService and DeleteService feed the engine;
// BindMember of a replica creates its pod already bound, StopReplica
// deletes it, and a new leader adopts the running replica pods (label
// LabelService, annotation AnnotationReplica). See service.go and
// docs/serving.md, section Backends.
//
// # Node autoscaling
//
// With Config.Provisioning (pools of nodes by label), the backend is a
// backends.Provisioner: ScaleUp asks cluster-autoscaler for capacity for
// gangs through a ProvisioningRequest (autoscaling.x-k8s.io/v1, class
// best-effort-atomic-scale-up) with a PodTemplate per member shape; the
// nodes that join bind the gang through the usual path; a request that
// failed is reported by Provisioning and deleted, one whose gangs are
// bound is deleted. ScaleDown cordons an idle node and removes
// cluster-autoscaler's scale-down-disabled annotation (berth sets it on
// its pools' nodes), so that cluster-autoscaler removes the machine. See
// provision.go and docs/backends/kube.md, "Node autoscaling".
//
// # Concurrency
//
// Start runs the informers, a sync goroutine that turns their changes into
// engine events, and the status writers. The Actuator methods are safe for
// concurrent use; Cluster, Running and Next are for the Runner's goroutine.
//
// # After a timeout
//
// A bind is a pods/binding request per member; one that timed out may
// have bound the pod anyway (the API server finished after its client gave
// up), which the pod informer shows as spec.nodeName. The backend is a
// backends.RunningReporter (RunningNow): the gangs with pods bound now,
// from berth's accepted Bindings and the informer's pods on a node. The
// Runner learns the truth from the abandoned request's answer or from
// RunningNow: a gang running where the engine bound it is adopted; one
// that is not is unbound (UnbindMember deletes a bound pod) and its bind
// failed. Two cases make the truth arrive after the Runner acted:
//   - an unbind of a member whose Binding is still in flight is an error,
//     not a no-op: the bind's outcome stays unknown until the Binding
//     answers, and the Runner looks again (a nil answer there, followed
//     by the Binding committing, was a ghost: a pod holding GPUs that no
//     unbind could find);
//   - a pod of berth's scheduler that the informer shows bound with no
//     bind of berth's recorded (the Binding committed, its call answered
//     an error) is recorded as bound, from its node and AnnotationGPUs,
//     not taken for another scheduler's bind (which cancelled the job);
//     UnbindMember also finds such a pod by its node and deletes it.
//
// See docs/reliability.md.
package kube
