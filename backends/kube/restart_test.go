package kube_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berthsched/berth/backends/kube"
	"github.com/berthsched/berth/engine"
)

// A restarted backend (a new berth process) adopts berth's bound pods on
// the GPU indices the engine booked when it bound them (AnnotationGPUs,
// written with the bind), not on the lowest free ones in pod order: the
// restored engine's books and the backend's report then agree. Before,
// a job whose indices differed was taken for moved, and when its new
// indices were still booked in the engine for another job it could not be
// adopted ("GPU already allocated"); the Runner then stops it and submits
// it again, and UnbindMember of an adopted job did nothing: the gang ran
// on while the engine had it pending and bound it again after it ended
// (the fault suite with Shape.StopOnTime: "job bound again after it
// ended"). UnbindMember of an adopted gang now deletes its pods.
func TestRestartAdoptsOnBoundGPUs(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	node := w.node("n0", 8)
	w.pod("a", 2)
	w.pod("b-0", 2, inKueueGroup("b", 2))
	w.pod("b-1", 2, inKueueGroup("b", 2))
	ida, idb := w.ns+"/pod/a", w.ns+"/group/b"

	open := func() *kube.Backend {
		b, err := kube.New(cs, dyn, w.config())
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		t.Cleanup(b.Close)
		_, err = b.Cluster(ctx) // as the Runner does, before Running
		require.NoError(t, err)
		return b
	}
	b1 := open()
	rs, err := b1.Running(ctx)
	require.NoError(t, err)
	require.Empty(t, rs)
	// The engine's books, not the lowest free indices: a on 6,7; b's
	// members on 4,5 and 0,1.
	booked := map[string][][]int{ida: {{6, 7}}, idb: {{4, 5}, {0, 1}}}
	for _, id := range []string{ida, idb} {
		for _, g := range booked[id] {
			require.NoError(t, b1.BindMember(ctx, id, engine.Member{Node: node, GPUs: g}), "bind %s on %v", id, g)
		}
	}
	w.waitBound(0, "a", "b-0", "b-1")
	assert.Equal(t, "6,7", w.get("a").Annotations[kube.AnnotationGPUs], "the Binding's annotation is on the pod")
	b1.Close()

	b2 := open()
	rs, err = b2.Running(ctx)
	require.NoError(t, err)
	got := map[string][][]int{}
	var bMembers []engine.Member
	for _, rj := range rs {
		for _, m := range rj.Members {
			assert.Equal(t, node, m.Node)
			got[rj.Job.ID] = append(got[rj.Job.ID], m.GPUs)
		}
		if rj.Job.ID == idb {
			bMembers = rj.Members
		}
	}
	for _, id := range []string{ida, idb} {
		want := slices.Clone(booked[id])
		slices.SortFunc(want, slices.Compare)
		slices.SortFunc(got[id], slices.Compare)
		assert.Equal(t, want, got[id], "%s adopted on the GPUs it was bound to", id)
	}

	// The Runner stops an adopted gang it cannot book by unbinding its
	// members: its pods are deleted.
	require.Len(t, bMembers, 2)
	for _, m := range bMembers {
		require.NoError(t, b2.UnbindMember(ctx, idb, m))
	}
	for _, name := range []string{"b-0", "b-1"} {
		p, err := cs.CoreV1().Pods(w.ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
			assert.NotNil(t, p.DeletionTimestamp, "pod %s of the stopped gang is deleted", name)
		}
	}
	_, err = cs.CoreV1().Pods(w.ns).Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err, "a is left alone")
}
