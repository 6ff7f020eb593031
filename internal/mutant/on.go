//go:build mutant

package mutant

import "os"

// Enabled is true in a binary built with -tags mutant.
const Enabled = true

// active is read once, at start.
var active = Name(os.Getenv(Env))

// On reports whether mutant n is the active one.
func On(n Name) bool { return active == n }

// Active is the active mutant's name, "" if none.
func Active() Name { return active }
