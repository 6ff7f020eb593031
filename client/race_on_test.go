//go:build race

package client

// raceEnabled: the race detector allocates, and drops pooled objects, on its own.
const raceEnabled = true
