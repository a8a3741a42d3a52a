// Package enginetest drives an engine.Engine from scenario files, like
// etcd's rafttest: each file in testdata/ is a small story (a cluster,
// queues, jobs arriving and ending) with the engine's decisions written
// after each step, so the file reads as documentation of one behaviour and
// fails when the behaviour changes. Golden output is refreshed with
//
//	go test ./engine/enginetest -rewrite
//
// # Commands
//
//	cluster levels=block,rack fanout=2,2 nodes=2 gpus=8 [model=H100] [share-free]
//	        [mig] [layout=3g,2g,1g,1g] [timeslice=REPLICAS] [mps=CLIENTS]
//	    a uniform cluster: nodes n0, n1, ... in domains b0/r0, ...;
//	    share-free: fractional members may share any free plain GPU
//	    (topo.Spec.ShareFreeGPUs); the rest applies to every node: MIG mode
//	    (model must be a MIG model, e.g. A100-40GB) with its instances,
//	    time-slicing or MPS
//	queues
//	    cohort NAME [parent=P] [gpu=N]
//	    queue NAME [cohort=C] [gpu=N] [borrow=N] [lend=N] [weight=W]
//	    (GPU quotas in whole GPUs; without "queues", one queue "q" and no quota)
//	engine [policy=drs|priority|fairtree] [backfill=none|easy|conservative]
//	       [depth=N] [window=D] [preempt=priority,reclaim] [max-victims=N]
//	       [on-failure=requeue|fail] [backoff=D] [backoff-max=D] [aging=D]
//	       [mig-off] [mig-factor=F] [mig-backoff=D]
//	submit [via=intake]
//	    ID [queue=Q] [members=N] [per=G] [prio=P] [est=D] [limit=D]
//	       [required=LEVEL] [preferred=LEVEL] [preemptible] [min-runtime=D]
//	       [grace=D] [elastic=MIN-MAX] [model=M] [selector=k:v] [milli=M]
//	       [profile=P]   (milli / profile: a fraction of one GPU or a MIG
//	                      profile per member)
//	       [user=U] [account=A] [name=N] [partitions=P1,P2]
//	       [after=afterok:ID,afterany:ID,afternotok:ID,singleton]
//	adopt
//	    ID [queue=Q] per=G on=n0:0-3,n1:0-3 [est=D] [limit=D] [prio=P] [preemptible]
//	       [since=D]   (it started D before now: the backend's start time)
//	tick D                   the clock moves D forward
//	finish ID...  finish-failed ID...  cancel ID...  checkpoint ID...
//	site                     before "engine": site rules, one a line:
//	    partition NAME [default] [nodes=n0,n1] [selector=k:v] [domains=rack:r0]
//	              [accounts=A,B] [queues=Q,R] [max-gpus=N] [max-runtime=D]
//	              [default-runtime=D] [max-nodes=N] [tier=N] [preempt=off]
//	    limits [max-jobs-per-user=N] [max-gpus-per-user=N]
//	           [max-gpus-per-account=N] [account.NAME=N]
//	    never-met cancel|hold
//	reservation NAME start=+D (dur=D|end=+D) (nodes=n0,n1 | gpus=N [domain=rack:r0])
//	            [accounts=A,B] [maint]
//	reservation NAME delete  reservation list
//	array tasks=N [throttle=K]   with one job line as input: a job array
//	add-node name=N domains=b0,r0 gpus=G [model=M] [labels=k:v,...]
//	         [mig] [layout=...] [timeslice=N] [mps=N]
//	    before "engine": part of the initial cluster; after: a node joins
//	node name=N [state=ready|cordoned|draining|down] [labels=k:v,...]
//	fail-node N
//	ready                    runs Ready and prints its decisions
//	advance [refuse=ID,...] [refuse-preempt=ID,...] [refuse-resize=ID,...]
//	        [refuse-mig=NODE:GPU,...]
//	view                     the published View: running jobs, free GPUs, usage
//	explain                  every pending job's estimate (View.Estimates) and
//	                         explanation (View.Explain)
//
// A bind in a partition prints "[partition P]"; a job a site rule holds
// prints what it waits on after its reason (Ready.Holds). Times print
// relative to the scenario's start as +D. GPU sets print per
// node as n0[0-3] (node-local indices); a fractional member prints as
// n0[3]{1g.10gb@6 new} (a MIG instance at memory slice 6, to be created)
// or n1[0]{share 250m, 4 replicas}. MIG reconfigurations print as
// "reconfigure n0[1]: FROM -> TO destroy [...] create [...]".
package enginetest
