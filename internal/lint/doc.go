// Package lint holds Concord's project rules as a Go test (STYLE principle
// 14: the repository checks itself). It has no code of its own; run it with
//
//	go test ./internal/lint/
//
// The test parses every non-test .go file of the module with go/parser (no
// `go list`, no type checking, no network; it takes well under a second) and
// checks the rules below. Files ending in _test.go are never checked, and
// neither are directories named testdata or starting with "." or "_".
//
// # Rules
//
// core-goroutine, core-clock, core-rand, core-import: the deterministic core
// (internal/replica, internal/kv, internal/placement and every package under
// it, such as the scheduler) has no `go` statement; does not use time.Now,
// Since, Until, Sleep, After, AfterFunc, NewTimer, NewTicker or Tick (the
// types time.Time and time.Duration are fine: a `now` passed in is an input);
// calls no global math/rand function (rand.Intn and friends; methods of an
// injected *rand.Rand are fine); and imports none of net/..., os/...,
// syscall, io/ioutil, crypto/rand, google.golang.org/grpc/... (except the
// constant-only grpc/codes), internal/transport, internal/grpcapi or
// internal/node. Why: the core must give the same output for the same input,
// so it can be tested tick by tick and run inside a deterministic simulation
// (STYLE principles 1 and 3).
//
// pebble-import: only internal/storage and the apply code of the state
// machines (internal/kv, internal/placement itself, internal/replica) import
// github.com/cockroachdb/pebble/.... Everything else goes through storage,
// so the engine, its batches and its fault-injecting vfs are handled in one
// place (STYLE section 11 and principle 13).
//
// layering: every package of the module has a layer in layerTable in
// lint_test.go, mirrored in docs/architecture.md. A package may import only
// packages of a strictly lower layer, or packages of its own table entry
// (internal/placement and internal/placement/scheduler). Packages on the
// same layer may not import each other: kv, placement and replica (replica
// defines StateMachine and never imports an implementation; kv and placement
// stay apart), and multiraft and transport. An entry may narrow this further with an explicit list (client may
// import only api/..., internal/ids, internal/routing and internal/dial).
// Test-support packages (testcluster, sim, multiraftest) sit above all
// production code, on one layer (so they do not import one another), and
// only tests/... and _test.go files may import them.
//
// unknown-package: a package that is not in layerTable fails the test.
//
// # Adding a package
//
// Add the package's path (relative to the module root; "x/..." covers x and
// everything under it) to the right layer of layerTable in lint_test.go,
// with a line saying what it is, and add it to the layer list in
// docs/architecture.md. If it needs to import a package of its own layer or a
// higher one, the layering is wrong: move code down, or split an interface
// out, rather than renumbering the table around the import.
//
// # Exceptions
//
// One line can be exempted from one rule by a comment on the line above it:
//
//	//lint:ignore core-rand picks a log-sampling slot; never reaches replicated state
//	if rand.IntN(100) == 0 {
//
// The reason is required. Known violations that are being removed are listed
// in knownViolations at the top of lint_test.go; an entry that no longer
// matches anything fails the test, so the list only shrinks.
package lint
