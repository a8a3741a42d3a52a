//go:build race

package fgd

// raceEnabled: under -race the full experiment is too slow; the test runs a
// reduced set (see TestPublished).
const raceEnabled = true
