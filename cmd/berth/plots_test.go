package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
)

// The wait-time CDF is drawn on a log x axis in seconds: zero and
// sub-second waits sit at the one-second floor (a log axis has no zero),
// one point per distinct wait, ending at 1.
func TestWaitCDFLogAxis(t *testing.T) {
	ws := []time.Duration{0, 0, 300 * time.Millisecond, 90 * time.Second, 90 * time.Second, 2 * time.Hour}
	got := waitCDF(ws)
	assert.Equal(t, plotter.XYs{
		{X: 1, Y: 0},
		{X: 1, Y: 3.0 / 6}, // the two zero waits and the 0.3 s one, at the floor
		{X: 90, Y: 5.0 / 6},
		{X: 7200, Y: 1},
	}, got)
	assert.Empty(t, waitCDF(nil))

	dir := t.TempDir()
	files, err := savePlot(dir, "cdf", "wait-time CDF", waitAxis, "fraction of jobs", false,
		[]series{{"fifo", got}, {"all-zero", waitCDF([]time.Duration{0, 0})}}, logX)
	require.NoError(t, err)
	require.Len(t, files, 2)
	for _, f := range files {
		st, err := os.Stat(f)
		require.NoError(t, err)
		assert.Positive(t, st.Size(), filepath.Base(f))
	}
	// Every job started at once: one point range on the log axis.
	_, err = savePlot(dir, "zero", "wait-time CDF", waitAxis, "fraction of jobs", false,
		[]series{{"all-zero", waitCDF([]time.Duration{0, 0})}}, logX)
	require.NoError(t, err)
	// Waits within one decade.
	_, err = savePlot(dir, "short", "wait-time CDF", waitAxis, "fraction of jobs", false,
		[]series{{"short", waitCDF([]time.Duration{2 * time.Second, 5 * time.Second})}}, logX)
	require.NoError(t, err)
}
