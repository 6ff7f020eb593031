//go:build !mutant

package mutant

// Enabled is false in every normal build: hooks compile to nothing.
const Enabled = false

// On reports whether mutant n is active; never, without the mutant tag.
func On(Name) bool { return false }

// Active is the active mutant's name; "" without the mutant tag.
func Active() Name { return "" }
