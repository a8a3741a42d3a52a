package mig

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/berthsched/berth/internal/tracetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type jsonGeometry struct {
	Examples map[string][][]string `json:"examples"`
	Models   []struct {
		Model            string   `json:"model"`
		Aliases          []string `json:"aliases"`
		PCIDeviceIDs     []string `json:"pciDeviceIds"`
		ComputeSlices    int      `json:"computeSlices"`
		MemorySliceCount int      `json:"memorySliceCount"`
		MinDriver        string   `json:"minDriver"`
		Profiles         []struct {
			Name            string `json:"name"`
			GPUSlices       int    `json:"gpuSlices"`
			MemorySlices    int    `json:"memorySlices"`
			MemoryGiB       int    `json:"memoryGiB"`
			MaxCount        int    `json:"maxCount"`
			NVMLProfile     string `json:"nvmlProfile"`
			DriverProfileID *int   `json:"driverProfileId"`
			MediaExtensions bool   `json:"mediaExtensions"`
			Placements      []struct {
				Start int `json:"start"`
				Size  int `json:"size"`
			} `json:"placements"`
			Confidence struct {
				Placements string `json:"placements"`
			} `json:"confidence"`
		} `json:"profiles"`
	} `json:"models"`
}

// loadGeometryJSON reads the reference geometry (mig/profiles.json in the
// shared folder beside the repository, or under $BERTH_SHARED). It is not
// part of a clone: when it is absent the test skips, and fails instead
// under BERTH_REQUIRE_TRACES=1 (which .ci/run sets), so that in CI the Go
// tables cannot drift from the data unnoticed.
func loadGeometryJSON(t *testing.T) *jsonGeometry {
	t.Helper()
	root := os.Getenv("BERTH_SHARED")
	if root == "" {
		root = filepath.Join("..", "..", "shared")
	}
	path := filepath.Join(root, "mig", "profiles.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		const why = "the MIG reference geometry cross-checks the tables of geometry.go; set $BERTH_SHARED to the shared folder that holds mig/profiles.json"
		if tracetest.Required() {
			t.Fatalf("%s required ($%s=1) but not found: %v; %s", path, tracetest.RequireEnv, err, why)
		}
		t.Skipf("%s not found (%v); %s", path, err, why)
	}
	require.NoError(t, err)
	var g jsonGeometry
	require.NoError(t, json.Unmarshal(b, &g))
	require.NotEmpty(t, g.Models)
	return &g
}

func TestGeometryMatchesJSON(t *testing.T) {
	g := loadGeometryJSON(t)
	require.Len(t, Models(), len(g.Models), "same models")
	for i, jm := range g.Models {
		m := Models()[i]
		assert.Equal(t, jm.Model, m.String())
		byName, err := LookupModel(jm.Model)
		require.NoError(t, err)
		assert.Equal(t, m, byName)
		assert.Equal(t, jm.Aliases, m.Aliases())
		for _, a := range jm.Aliases {
			am, err := LookupModel(a)
			require.NoError(t, err, a)
			assert.Equal(t, m, am)
		}
		require.Len(t, m.PCIDeviceIDs(), len(jm.PCIDeviceIDs))
		for j, s := range jm.PCIDeviceIDs {
			id, err := strconv.ParseUint(s, 0, 32)
			require.NoError(t, err)
			assert.Equal(t, uint32(id), m.PCIDeviceIDs()[j])
			bm, err := ModelByPCIDeviceID(uint32(id))
			require.NoError(t, err)
			assert.Equal(t, m, bm)
		}
		assert.Equal(t, jm.ComputeSlices, m.ComputeSlices())
		assert.Equal(t, jm.MemorySliceCount, m.MemorySlices())
		assert.Equal(t, jm.MinDriver, m.MinDriver())
		require.Len(t, m.Profiles(), len(jm.Profiles), jm.Model)
		for j, jp := range jm.Profiles {
			p := m.Profiles()[j]
			assert.Equal(t, jp.Name, p.Name())
			assert.Equal(t, jp.GPUSlices, p.ComputeSlices(), jp.Name)
			assert.Equal(t, jp.MemorySlices, p.MemorySlices(), jp.Name)
			assert.Equal(t, jp.MemoryGiB, p.MemoryGiB(), jp.Name)
			assert.Equal(t, jp.MaxCount, p.MaxCount(), jp.Name)
			assert.Equal(t, jp.NVMLProfile, p.NVMLProfile(), jp.Name)
			assert.Equal(t, jp.MediaExtensions, p.MediaExtensions(), jp.Name)
			assert.Equal(t, jp.Confidence.Placements, p.PlacementsConfidence(), jp.Name)
			id, ok := p.DriverProfileID()
			if jp.DriverProfileID == nil {
				assert.False(t, ok, jp.Name)
			} else {
				assert.True(t, ok, jp.Name)
				assert.Equal(t, *jp.DriverProfileID, id, jp.Name)
			}
			var starts []int
			for _, pl := range jp.Placements {
				assert.Equal(t, jp.MemorySlices, pl.Size, "%s: placement size", jp.Name)
				starts = append(starts, pl.Start)
			}
			assert.Equal(t, starts, p.Starts(), jp.Name)
			byName, err := m.Profile(jp.Name)
			require.NoError(t, err)
			assert.Equal(t, p, byName)
		}
	}
}

func TestModelFacts(t *testing.T) {
	for name, reset := range map[string]bool{
		"A100-40GB": true, "A100-80GB": true, "A30-24GB": true,
		"H100-80GB": false, "H200-141GB": false, "B200-180GB": false,
	} {
		m, err := LookupModel(name)
		require.NoError(t, err)
		assert.Equal(t, reset, m.ResetToToggle(), name)
	}
	m, err := LookupModel("NVIDIA h100-sxm5-80gb")
	require.NoError(t, err)
	assert.Equal(t, "H100-80GB", m.String())
	assert.Equal(t, 80, m.MemoryGiB())
	_, err = LookupModel("V100")
	assert.ErrorIs(t, err, ErrUnknownModel)
	_, err = ModelByPCIDeviceID(1)
	assert.ErrorIs(t, err, ErrUnknownModel)

	// Short names pick the smallest profile with that compute.
	for _, tc := range []struct{ model, short, want string }{
		{"H100-80GB", "1g", "1g.10gb"},
		{"H100-80GB", "1g+me", "1g.10gb+me"},
		{"A100-40GB", "1g", "1g.5gb"},
		{"A100-40GB", "3g", "3g.20gb"},
		{"A30-24GB", "2g+me", "2g.12gb+me"},
		{"B200-180GB", "7g", "7g.180gb"},
	} {
		m, err := LookupModel(tc.model)
		require.NoError(t, err)
		p, err := m.Profile(tc.short)
		require.NoError(t, err)
		assert.Equal(t, tc.want, p.Name(), tc)
	}
	_, err = m.Profile("5g")
	assert.ErrorIs(t, err, ErrUnknownProfile)
	_, err = NoModel.Profile("1g")
	assert.ErrorIs(t, err, ErrUnknownModel)
	assert.False(t, Profile{}.Valid())
}

func TestResolve(t *testing.T) {
	h100, _ := LookupModel("H100-80GB")
	a30, _ := LookupModel("A30-24GB")
	for _, tc := range []struct {
		m    Model
		r    Request
		want string
	}{
		{h100, Request{Milli: 1}, "1g.10gb"},
		{h100, Request{Milli: 142}, "1g.10gb"}, // 142/1000 <= 1/7
		{h100, Request{Milli: 143}, "2g.20gb"}, // 143/1000 > 1/7
		{h100, Request{Milli: 250}, "2g.20gb"},
		{h100, Request{Milli: 500}, "4g.40gb"},
		{h100, Request{Milli: 810}, "7g.80gb"},
		{h100, Request{Milli: 1000}, "7g.80gb"},
		{h100, Request{MemoryMiB: 12 * 1024}, "1g.20gb"},
		{h100, Request{Milli: 100, MemoryMiB: 30 * 1024}, "3g.40gb"},
		{h100, Request{Profile: "2g.20gb"}, "2g.20gb"},
		{a30, Request{Milli: 250}, "1g.6gb"},
		{a30, Request{Milli: 251}, "2g.12gb"},
	} {
		p, err := tc.m.Resolve(tc.r)
		require.NoError(t, err, tc.r)
		assert.Equal(t, tc.want, p.Name(), "%v on %v", tc.r, tc.m)
	}
	_, err := h100.Resolve(Request{MemoryMiB: 100 * 1024})
	assert.ErrorIs(t, err, ErrNoProfile)
	for _, bad := range []Request{{}, {Milli: 1001}, {Milli: -1}, {Profile: "1g", Milli: 5}, {MemoryMiB: -1}} {
		_, err := h100.Resolve(bad)
		assert.ErrorIs(t, err, ErrBadRequest, bad)
	}
}
