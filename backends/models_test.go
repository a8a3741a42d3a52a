package backends_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/gang"
)

func TestParseModelConstraint(t *testing.T) {
	for _, c := range []struct {
		in     string
		models []string
		same   bool
	}{
		{"", nil, false},
		{"a100", []string{"a100"}, false},
		{"a100|h100", []string{"a100", "h100"}, false},
		{" a100 | h100 |a100", []string{"a100", "h100"}, false},
		{"[a100|h100]", []string{"a100", "h100"}, true},
		{"[a100]", []string{"a100"}, false},
	} {
		m, same, err := backends.ParseModelConstraint(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.models, m, c.in)
		assert.Equal(t, c.same, same, c.in)
	}
	for _, bad := range []string{"a100&ib", "a100*2", "(a100|h100)", "[a100|h100", "a100||h100", "a100,h100", "|"} {
		_, _, err := backends.ParseModelConstraint(bad)
		assert.ErrorIs(t, err, backends.ErrModelConstraint, bad)
	}
}

func TestSetModels(t *testing.T) {
	var g gang.Group
	require.NoError(t, backends.SetModels(&g, "", "a100|h100"))
	assert.Equal(t, gang.Group{GPUModels: []string{"a100", "h100"}}, g)
	g = gang.Group{}
	require.NoError(t, backends.SetModels(&g, "", "[a100|h100]"))
	assert.Equal(t, gang.Group{GPUModels: []string{"a100", "h100"}, SameModel: true}, g)
	g = gang.Group{}
	require.NoError(t, backends.SetModels(&g, "h100", "a100|h100"))
	assert.Equal(t, gang.Group{GPUModel: "h100"}, g)
	g = gang.Group{}
	require.NoError(t, backends.SetModels(&g, "", "a100"))
	assert.Equal(t, gang.Group{GPUModel: "a100"}, g)
	assert.ErrorIs(t, backends.SetModels(&g, "l40", "a100|h100"), backends.ErrModelConstraint)
}

func TestAffinityModels(t *testing.T) {
	const key = "nvidia.com/gpu.product"
	in := func(v ...string) backends.NodeRequirement {
		return backends.NodeRequirement{Key: key, Operator: "In", Values: v}
	}
	zone := backends.NodeRequirement{Key: "zone", Operator: "In", Values: []string{"a"}}
	m, err := backends.AffinityModels(key, [][]backends.NodeRequirement{{zone, in("A100-40GB", "A100-80GB")}})
	require.NoError(t, err)
	assert.Equal(t, []string{"A100-40GB", "A100-80GB"}, m)
	m, err = backends.AffinityModels(key, [][]backends.NodeRequirement{{in("A", "B", "C"), in("C", "B")}, {in("D")}})
	require.NoError(t, err)
	assert.Equal(t, []string{"B", "C", "D"}, m, "intersection in a term, union over terms")
	m, err = backends.AffinityModels(key, [][]backends.NodeRequirement{{in("A")}, {zone}})
	require.NoError(t, err)
	assert.Nil(t, m, "a term without the key allows any model")
	m, err = backends.AffinityModels(key, nil)
	require.NoError(t, err)
	assert.Nil(t, m)
	_, err = backends.AffinityModels(key, [][]backends.NodeRequirement{{{Key: key, Operator: "NotIn", Values: []string{"T4"}}}})
	assert.ErrorIs(t, err, backends.ErrModelConstraint)
	_, err = backends.AffinityModels(key, [][]backends.NodeRequirement{{in("A"), in("B")}})
	assert.ErrorIs(t, err, backends.ErrModelConstraint, "no model left")
}
