package nvml

import (
	"context"
	"fmt"
	"slices"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// Health is one health event of a GPU.
type Health struct {
	GPU  int
	UUID string
	// Kind is "xid", "ecc-double-bit", "ecc-single-bit", "quarantine",
	// "restore" or "register-failed".
	Kind string
	XID  uint64
	// Critical: the GPU is taken out of service.
	Critical bool
	Detail   string
	Time     time.Time
}

type badGPU struct {
	reason string
	since  time.Time
	held   bool // the hold job is adopted by the engine
	jobs   []string
}

// holdMargin is how long after the last preemption deadline on a failed
// GPU its hold is adopted: the engine releases a preempted job's GPUs at
// the deadline, on its own clock.
const holdMargin = time.Second

// HoldJobID is the ID of the job that holds a failed GPU out of the free
// set.
func HoldJobID(uuid string) string { return "nvml-hold." + uuid }

// startHealth registers every GPU for XID and ECC events and starts the
// watcher goroutine.
func (b *Backend) startHealth(ctx context.Context) error {
	set, ret := b.lib.EventSetCreate()
	if ret != nv.SUCCESS {
		return callErr("EventSetCreate", ret)
	}
	want := uint64(nv.EventTypeXidCriticalError | nv.EventTypeDoubleBitEccError | nv.EventTypeSingleBitEccError)
	for i := range b.devs {
		d := b.devs[i].dev
		types := want
		if sup, ret := d.GetSupportedEventTypes(); ret == nv.SUCCESS {
			types &= sup
		}
		if ret := d.RegisterEvents(types, set); ret != nv.SUCCESS {
			// Health of this GPU is not watched: said, not fatal (an XID
			// still shows in the kernel log and nvidia-smi).
			b.report(Health{GPU: i, UUID: b.devs[i].UUID, Kind: "register-failed", Detail: ret.Error(), Time: time.Now()})
		}
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer set.Free()
		for ctx.Err() == nil {
			e, ret := set.Wait(500)
			switch ret {
			case nv.SUCCESS:
				b.onEvent(e)
			case nv.ERROR_TIMEOUT:
			default:
				// A GPU fell off the bus (GPU_IS_LOST) or the driver
				// failed: wait a little rather than spin.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return nil
}

func (b *Backend) report(h Health) {
	if cb := b.cfg.OnHealth; cb != nil {
		b.cb.add(func() { cb(h) })
	}
}

func (b *Backend) gpuOf(d nv.Device) int {
	if d == nil {
		return -1
	}
	u, ret := d.GetUUID()
	if ret != nv.SUCCESS {
		return -1
	}
	for i := range b.devs {
		if b.devs[i].UUID == u {
			return i
		}
	}
	return -1
}

func (b *Backend) onEvent(e nv.EventData) {
	g := b.gpuOf(e.Device)
	if g < 0 {
		return
	}
	h := Health{GPU: g, UUID: b.devs[g].UUID, Time: time.Now()}
	switch {
	case e.EventType&nv.EventTypeXidCriticalError != 0:
		h.Kind, h.XID, h.Critical = "xid", e.EventData, b.cfg.CriticalXID(e.EventData)
		h.Detail = fmt.Sprintf("XID %d", e.EventData)
	case e.EventType&nv.EventTypeDoubleBitEccError != 0:
		h.Kind, h.Critical, h.Detail = "ecc-double-bit", true, "uncorrectable (double-bit) ECC error"
	case e.EventType&nv.EventTypeSingleBitEccError != 0:
		h.Kind, h.Detail = "ecc-single-bit", "corrected (single-bit) ECC error"
	default:
		return
	}
	b.report(h)
	if h.Critical {
		_ = b.Quarantine(context.Background(), h.UUID, h.Detail) // the UUID is the box's own
	}
}

// Quarantine takes a GPU out of service, as a critical XID or a
// double-bit ECC error does: binds and MIG changes on it are refused, the
// jobs with a member on it are stopped (SIGTERM, KillGrace, SIGKILL) and
// requeued whole (reported Finished and submitted again at the next
// Next), and a hold job (HoldJobID, in Config.HoldQueue) is adopted on the
// GPU so that the engine keeps it out of the free set. On a MIG box the
// GPU is not held (a hold cannot take a GPU in MIG mode); binds on it are
// refused. Only Restore brings it back. Errors: ErrUnknownGPU.
func (b *Backend) Quarantine(ctx context.Context, uuid, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gpuByUUID(uuid)
	if g < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownGPU, uuid)
	}
	b.quarantineLocked(g, reason)
	return nil
}

func (b *Backend) gpuByUUID(uuid string) int {
	return slices.IndexFunc(b.devs, func(d Device) bool { return d.UUID == uuid })
}

func (b *Backend) quarantineLocked(g int, reason string) {
	if b.bad[g] != nil {
		return
	}
	bg := &badGPU{reason: reason, since: time.Now()}
	b.bad[g] = bg
	for _, r := range b.allRuns() {
		if !r.usesGPU(g) || r.reported {
			continue
		}
		if !r.preempted && !r.requeued && !r.cancelled {
			r.requeued = true
			b.requeue = append(b.requeue, r.job)
			bg.jobs = append(bg.jobs, r.job.ID)
		}
		b.stopLocked(r, ReasonGPUFailed, b.cfg.KillGrace)
	}
	b.report(Health{GPU: g, UUID: b.devs[g].UUID, Kind: "quarantine", Critical: true, Detail: reason, Time: time.Now()})
	b.signal()
}

// Restore puts a GPU taken out of service back (the operator's word):
// its hold job is reported finished and binds on it are accepted again.
// Errors: ErrUnknownGPU, ErrInvalid (the GPU is in service).
func (b *Backend) Restore(ctx context.Context, uuid string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gpuByUUID(uuid)
	if g < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownGPU, uuid)
	}
	bg := b.bad[g]
	if bg == nil {
		return fmt.Errorf("%w: GPU %s is in service", ErrInvalid, uuid)
	}
	delete(b.bad, g)
	if bg.held {
		b.push(engine.Finished(time.Now(), HoldJobID(uuid)))
	}
	if b.model.Valid() {
		b.resyncLayout(g)
	}
	b.report(Health{GPU: g, UUID: uuid, Kind: "restore", Time: time.Now()})
	b.signal()
	return nil
}

// OutOfService lists the GPUs taken out of service, with why.
func (b *Backend) OutOfService() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	for g, bg := range b.bad {
		out[b.devs[g].UUID] = bg.reason
	}
	return out
}

// healthEventsLocked queues what GPU failures mean to the engine: the
// jobs on a failed GPU finished and submitted again (requeued whole), then
// the GPU's hold adopted once no preempted job may still hold it in the
// engine's books. It returns when a hold is due later (zero: none).
// Called from Next, between cycles: the engine has advanced every bind the
// backend made, so the jobs it requeues are running in its books.
func (b *Backend) healthEventsLocked(now time.Time) time.Time {
	for _, j := range b.requeue {
		b.evs = append(b.evs, engine.Finished(now, j.ID), engine.Submitted(now, cloneJob(j)))
	}
	b.requeue = nil
	var due time.Time
	if b.model.Valid() {
		return due
	}
	for _, g := range sortedKeys(b.bad) {
		bg := b.bad[g]
		if bg.held {
			continue
		}
		if at := b.busyTill[g].Add(holdMargin); at.After(now) {
			if due.IsZero() || at.Before(due) {
				due = at
			}
			continue
		}
		bg.held = true
		hold := &queue.Job{
			ID: HoldJobID(b.devs[g].UUID), Queue: b.cfg.HoldQueue, Priority: 1<<31 - 1, Class: queue.ClassBestEffort,
			Request: gang.Request{Groups: []gang.Group{{Name: "hold", Members: 1, GPUsPerMember: 1}}},
			Submit:  now,
		}
		b.evs = append(b.evs, engine.Adopted(now, hold, []engine.Member{{Node: b.node, GPUs: []int{g}}}))
	}
	return due
}

func sortedKeys(m map[int]*badGPU) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
