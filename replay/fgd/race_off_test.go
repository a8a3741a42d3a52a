//go:build !race

package fgd

const raceEnabled = false
