package slurm

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNodeBusy(t *testing.T) {
	assert.True(t, nodeBusy(nodeRec{State: "allocated"}))
	assert.True(t, nodeBusy(nodeRec{State: "mixed", StateFlags: []string{"DRAIN"}}))
	assert.True(t, nodeBusy(nodeRec{State: "idle", StateFlags: []string{"COMPLETING"}}))
	assert.False(t, nodeBusy(nodeRec{State: "idle", StateFlags: []string{"DRAIN"}}))
	assert.False(t, nodeBusy(nodeRec{State: "idle"}))
}
