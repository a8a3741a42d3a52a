package gang

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTakeAscending(t *testing.T) {
	g := []int16{500, 300, 1000, 700}
	takeAscending(g, member{gpus: 2, milli: 400})
	assert.Equal(t, []int16{100, 300, 1000, 300}, g, "the two smallest with room, each once")
	g = []int16{1000, 0, 1000, 1000}
	takeAscending(g, member{gpus: 2, milli: 1000})
	assert.Equal(t, []int16{0, 0, 0, 1000}, g, "whole GPUs: lowest indices")
	g = []int16{900, 900}
	takeAscending(g, member{gpus: 2, milli: 400})
	assert.Equal(t, []int16{500, 500}, g, "a GPU is not taken twice")
}

func TestMemberOf(t *testing.T) {
	assert.Equal(t, member{gpus: 2, milli: 1000, cpu: 5}, memberOf(&Group{Members: 3, GPUsPerMember: 2, CPUMilli: 5}))
	assert.Equal(t, member{gpus: 1, milli: 250, model: "T4"}, memberOf(&Group{Members: 1, GPUMilli: 250, GPUModel: "T4"}))
	assert.Equal(t, member{mem: 7}, memberOf(&Group{Members: 1, MIGProfile: "1g.10gb", MemoryMiB: 7}), "MIG members score on host resources")
}
