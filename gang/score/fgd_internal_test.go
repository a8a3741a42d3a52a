package score

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTakeAscending(t *testing.T) {
	g := []int16{500, 300, 1000, 700}
	takeAscending(g, Request{GPUs: 2, Milli: 400})
	assert.Equal(t, []int16{100, 300, 1000, 300}, g, "the two smallest with room, each once")
	g = []int16{1000, 0, 1000, 1000}
	takeAscending(g, Request{GPUs: 2, Milli: 1000})
	assert.Equal(t, []int16{0, 0, 0, 1000}, g, "whole GPUs: lowest indices")
	g = []int16{900, 900}
	takeAscending(g, Request{GPUs: 2, Milli: 400})
	assert.Equal(t, []int16{500, 500}, g, "a GPU is not taken twice")
}
