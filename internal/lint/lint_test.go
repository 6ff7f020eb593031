package lint

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// knownViolations are findings on today's tree that are being removed. Each
// entry exempts one (package, rule, subject) triple, where the subject is the
// imported path or the banned identifier. An entry that matches nothing fails
// the test: delete it when its violation is gone.
var knownViolations = []knownViolation{
	// Empty: every rule holds. Add an entry only with a reason and the issue
	// that removes it; an entry that matches nothing fails the test.
}

const pebblePath = "github.com/cockroachdb/pebble/v2"

type knownViolation struct {
	pkg, rule, subject, why string
}

// Rule names, as used in messages and in //lint:ignore comments.
const (
	ruleCoreGo     = "core-goroutine"
	ruleCoreClock  = "core-clock"
	ruleCoreRand   = "core-rand"
	ruleCoreImport = "core-import"
	rulePebble     = "pebble-import"
	ruleLayering   = "layering"
	ruleUnknownPkg = "unknown-package"
	ruleBadIgnore  = "bad-ignore"
)

// Why each rule exists; printed with every finding.
const (
	whyCore = "replica, kv and placement (state machine and scheduler) are deterministic: " +
		"they own no clock, goroutine, socket, file or random source, so they can be tested " +
		"tick by tick and simulated (STYLE principles 1, 3)"
	whyPebble = "only internal/storage and the state machines' apply code (kv, placement, " +
		"replica's Persist/Apply batches) touch Pebble; everything else goes through storage, " +
		"so the engine and its fault-injecting vfs sit in one place (STYLE §11, principle 13)"
	whyLayering = "imports point down the layer table only, so each layer can be read and " +
		"tested with only the layers below it and no cycle can grow (STYLE §11 \"Dependency direction\")"
	whyTestSupport = "test-support packages start processes, servers or fake clusters; " +
		"production code never links them (STYLE §11)"
	whyUnknown = "every package has a layer, so its allowed imports are written down: add it to " +
		"layerTable in internal/lint/lint_test.go and to the layer list in docs/architecture.md"
)

// corePkgs are the deterministic core (STYLE principles 1 and 3).
var corePkgs = []string{
	"internal/replica",
	"internal/kv",
	"internal/placement/...", // the placement state machine and the scheduler
}

// coreBannedCalls are the functions of package time that read or wait on the
// wall clock. The types time.Time and time.Duration stay allowed.
var coreBannedCalls = []string{
	"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick",
}

// coreBannedImports are import paths ("x/..." covers x and below) the core
// may not import: sockets, files, processes, global randomness, and the
// layers that own them.
var coreBannedImports = []string{
	"net/...",
	"os/...",
	"syscall",
	"io/ioutil",
	"crypto/rand",
	"google.golang.org/grpc/...",
	"$/internal/transport",
	"$/internal/grpcapi",
	"$/internal/node",
}

// coreAllowedImports override coreBannedImports.
var coreAllowedImports = []string{
	// A list of constants: kv and placement put these codes into
	// CommandResult.ErrorCode. It opens no socket and starts no goroutine.
	"google.golang.org/grpc/codes",
}

// randAllowed are the names of math/rand and math/rand/v2 that do not use
// the global source: constructors and types.
var randAllowed = []string{
	"New", "NewSource", "NewPCG", "NewChaCha8", "NewZipf",
	"Rand", "Source", "Source64", "PCG", "ChaCha8", "Zipf",
}

// pebbleAllowed are the packages that may import github.com/cockroachdb/pebble/....
// internal/placement is listed exactly: its subpackages (the scheduler) may not.
var pebbleAllowed = []string{
	"internal/storage",
	"internal/kv",
	"internal/placement",
	"internal/replica",
}

// layer is one row of the layer table.
type layer struct {
	n    int
	pkgs []string // module-relative paths; "x/..." covers x and below
	// only, if set, is the complete list of module packages these packages
	// may import (each must also be on a lower layer).
	only []string
	// testSupport marks packages that only tests may import.
	testSupport bool
	// mayUseTestSupport marks packages that may import test support.
	mayUseTestSupport bool
}

// layerTable is the dependency direction of STYLE §11, mirrored in
// docs/architecture.md. A package may import packages of a strictly lower
// layer, or of its own pattern (internal/placement/...).
var layerTable = []layer{
	{n: 0, pkgs: []string{
		"internal/ids", // typed NodeID, ShardID, ReplicaID
	}},
	{n: 0, pkgs: []string{
		"internal/mutant", // planted bugs for mutation testing; compiled out without -tags mutant
	}},
	{n: 0, pkgs: []string{
		"internal/version", // levels of what replicas apply: the cluster version gate
	}},
	{n: 0, pkgs: []string{
		"internal/pbcount", // counts a protobuf message's repeated elements before it is decoded
	}},
	{n: 1, pkgs: []string{
		"api/...",             // concordpb: the public protocol
		"internal/keys",       // the Pebble key layout
		"internal/resp",       // the Redis protocol's codec (RESP2/RESP3)
		"internal/metrics",    // a node's Prometheus registry and instruments
		"internal/backupfile", // the backup file format
		"internal/certs",      // development CA and certificates; TLS configs from files
		"internal/frame",      // the framed TCP wires' hello and frames
		"internal/raftwire",   // hand-written encoding of raft messages
	}},
	{n: 2, pkgs: []string{
		"internal/storepb", // persisted protos (imports concordpb)
	}},
	{n: 3, pkgs: []string{
		"internal/storage", // Pebble engine, raft.Storage, snapshots
		"internal/routing", // key → shard
		"internal/dial",    // gRPC dial options
		"internal/portmux", // gRPC and RESP on one port
		"internal/hints",   // available mode's hint log (kept through storage's hint records)
	}},
	{n: 4, pkgs: []string{
		// The deterministic core. None imports another: replica defines
		// StateMachine, kv and placement implement it, node wires them.
		"internal/kv",            // KV state machine
		"internal/placement/...", // meta state machine and scheduler
		"internal/replica",       // one Raft replica
	}},
	{n: 5, pkgs: []string{
		// Neither imports the other: multiraft defines the Transport it
		// sends through, transport delivers to a Receiver.
		"internal/multiraft", // the replica host: event loop over all replicas
		"internal/transport", // gRPC peer streams
	}},
	{n: 6, pkgs: []string{
		"internal/grpcapi",  // KV/Cluster/Admin gRPC handlers
		"internal/redisapi", // the Redis protocol server, on the KV service
		"internal/httpapi",  // /healthz, /readyz, /metrics, /api/status
	}},
	{n: 6, pkgs: []string{
		"internal/expiry", // the sweep that deletes expired keys through raft
	}},
	{n: 7, pkgs: []string{
		"internal/node", // assembles one process
	}},
	{n: 8, pkgs: []string{
		"client/...", // public Go client
	}, only: []string{"api/...", "internal/ids", "internal/routing", "internal/dial", "internal/certs", "internal/frame"}},
	{n: 9, pkgs: []string{
		"internal/bench",        // load generator
		"internal/localcluster", // starts a local cluster
	}},
	{n: 10, pkgs: []string{
		"internal/cli", // one file per CLI verb
	}},
	{n: 11, pkgs: []string{
		"cmd/...",   // binaries
		"bench/...", // benchmark drivers
	}},
	{n: 20, testSupport: true, mayUseTestSupport: true, pkgs: []string{
		"internal/testcluster",
		"internal/sim/...",
		"internal/multiraft/multiraftest",
	}},
	{n: 21, mayUseTestSupport: true, pkgs: []string{
		"tests/...",     // end-to-end and robustness tests
		"internal/lint", // this test
	}},
}

// finding is one rule violation.
type finding struct {
	pos     token.Position // Filename is module-relative
	pkg     string         // module-relative package path
	rule    string
	subject string // import path or identifier, for knownViolations
	msg     string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: [%s] %s", f.pos.Filename, f.pos.Line, f.rule, f.msg)
}

// checker runs the rules over one module tree.
type checker struct {
	root, module string
	fset         *token.FileSet
	findings     []finding
}

// goFile is one parsed non-test file.
type goFile struct {
	pkg     string // module-relative package path
	rel     string // module-relative file path
	ast     *ast.File
	ignores map[int][]string // line of a //lint:ignore comment → rules
}

// check parses the non-test .go files under root, whose module path is
// module, and returns every finding, sorted.
func check(root, module string) ([]finding, error) {
	c := &checker{root: root, module: module, fset: token.NewFileSet()}
	files, err := c.parse()
	if err != nil {
		return nil, err
	}
	pkgs := map[string]bool{}
	for _, f := range files {
		if !pkgs[f.pkg] {
			pkgs[f.pkg] = true
			if _, ok := lookupLayer(f.pkg); !ok {
				c.report(f, f.ast.Name, ruleUnknownPkg, f.pkg,
					fmt.Sprintf("package %s is not in the layer table: %s", f.pkg, whyUnknown))
			}
		}
		c.checkImports(f)
		if matchAny(corePkgs, f.pkg) {
			c.checkCore(f)
		}
	}
	sort.Slice(c.findings, func(i, j int) bool {
		a, b := c.findings[i], c.findings[j]
		if a.pos.Filename != b.pos.Filename {
			return a.pos.Filename < b.pos.Filename
		}
		if a.pos.Line != b.pos.Line {
			return a.pos.Line < b.pos.Line
		}
		return a.rule < b.rule
	})
	return c.findings, nil
}

// parse reads every non-test .go file under the root, skipping testdata,
// hidden and "_" directories, and nested modules.
func (c *checker) parse() ([]*goFile, error) {
	var files []*goFile
	err := filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == c.root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(c.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		af, err := parser.ParseFile(c.fset, rel, src, parser.ParseComments)
		if err != nil {
			return err
		}
		f := &goFile{pkg: path.Dir(rel), rel: rel, ast: af}
		f.ignores = c.parseIgnores(f)
		files = append(files, f)
		return nil
	})
	return files, err
}

// parseIgnores collects the //lint:ignore <rule> <reason> comments of f.
// A directive without a reason is itself a finding and exempts nothing.
func (c *checker) parseIgnores(f *goFile) map[int][]string {
	ignores := map[int][]string{}
	for _, cg := range f.ast.Comments {
		for _, cm := range cg.List {
			text := strings.TrimPrefix(cm.Text, "//")
			text = strings.TrimPrefix(text, " ")
			rest, ok := strings.CutPrefix(text, "lint:ignore")
			if !ok {
				continue
			}
			fields := strings.Fields(rest)
			if len(fields) < 2 {
				c.report(f, cm, ruleBadIgnore, "lint:ignore",
					"//lint:ignore needs a rule and a reason: //lint:ignore <rule> <why this line is safe>")
				continue
			}
			line := c.fset.Position(cm.Pos()).Line
			ignores[line] = append(ignores[line], fields[0])
		}
	}
	return ignores
}

// report records a finding at n unless the line above n carries a
// //lint:ignore for the rule.
func (c *checker) report(f *goFile, n ast.Node, rule, subject, msg string) {
	pos := c.fset.Position(n.Pos())
	if slices.Contains(f.ignores[pos.Line-1], rule) {
		return
	}
	c.findings = append(c.findings, finding{pos: pos, pkg: f.pkg, rule: rule, subject: subject, msg: msg})
}

// checkImports applies the import rules of the core, Pebble and layering.
func (c *checker) checkImports(f *goFile) {
	from, fromOK := lookupLayer(f.pkg)
	core := matchAny(corePkgs, f.pkg)
	for _, spec := range f.ast.Imports {
		imp, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			continue
		}
		if core && c.matchImport(coreBannedImports, imp) && !c.matchImport(coreAllowedImports, imp) {
			c.report(f, spec, ruleCoreImport, imp,
				fmt.Sprintf("%s imports %s: %s", f.pkg, imp, whyCore))
		}
		if matchPattern("github.com/cockroachdb/pebble/...", imp) && !slices.Contains(pebbleAllowed, f.pkg) {
			c.report(f, spec, rulePebble, imp,
				fmt.Sprintf("%s imports %s: %s", f.pkg, imp, whyPebble))
		}
		rel, ok := strings.CutPrefix(imp, c.module+"/")
		if !ok || !fromOK {
			continue
		}
		to, ok := lookupLayer(rel)
		if !ok {
			continue // reported as unknown-package where it is defined
		}
		if msg := layeringError(f.pkg, from, rel, to); msg != "" {
			c.report(f, spec, ruleLayering, rel, msg)
		}
	}
}

// layeringError says why package from (on layer lf) may not import package
// to (on layer lt), or returns "".
func layeringError(from string, lf layerMatch, to string, lt layerMatch) string {
	if lt.pattern == lf.pattern {
		return "" // its own subpackages
	}
	if lt.testSupport && !lf.mayUseTestSupport {
		return fmt.Sprintf("%s imports test-support package %s: %s", from, to, whyTestSupport)
	}
	if lf.only != nil && !matchAny(lf.only, to) {
		return fmt.Sprintf("%s may import only %s of this module, not %s: %s",
			from, strings.Join(lf.only, ", "), to, whyLayering)
	}
	if lt.n == lf.n {
		return fmt.Sprintf("%s imports %s, and both are on layer %d; packages of one layer may not import each other: %s",
			from, to, lf.n, whyLayering)
	}
	if lt.n > lf.n {
		return fmt.Sprintf("%s (layer %d) imports %s (layer %d), a higher layer: %s", from, lf.n, to, lt.n, whyLayering)
	}
	return ""
}

// checkCore applies the goroutine, clock and randomness rules to a core file.
func (c *checker) checkCore(f *goFile) {
	timeNames, randNames := map[string]bool{}, map[string]bool{}
	for _, spec := range f.ast.Imports {
		imp, _ := strconv.Unquote(spec.Path.Value)
		name := importName(spec, imp)
		switch imp {
		case "time":
			timeNames[name] = true
		case "math/rand", "math/rand/v2":
			randNames[name] = true
		}
	}
	ast.Inspect(f.ast, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			c.report(f, n, ruleCoreGo, "go",
				fmt.Sprintf("go statement in %s; goroutines belong to multiraft and node: %s", f.pkg, whyCore))
		case *ast.SelectorExpr:
			// x.Obj is set when x resolves to a declaration in the file
			// (a variable called rand, say); an imported package name
			// stays unresolved. ast.Object is deprecated in favour of
			// go/types, which would need the whole build; this is enough.
			x, ok := n.X.(*ast.Ident)
			if !ok || x.Obj != nil {
				return true
			}
			sel := n.Sel.Name
			switch {
			case timeNames[x.Name] && slices.Contains(coreBannedCalls, sel):
				c.report(f, n, ruleCoreClock, "time."+sel,
					fmt.Sprintf("time.%s in %s; take the time or a tick as an input: %s", sel, f.pkg, whyCore))
			case randNames[x.Name] && !slices.Contains(randAllowed, sel):
				c.report(f, n, ruleCoreRand, "rand."+sel,
					fmt.Sprintf("global rand.%s in %s; use an injected *rand.Rand: %s", sel, f.pkg, whyCore))
			}
		}
		return true
	})
}

// importName is the name an import is known by in its file.
func importName(spec *ast.ImportSpec, imp string) string {
	if spec.Name != nil {
		return spec.Name.Name
	}
	base := path.Base(imp)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		base = path.Base(path.Dir(imp)) // math/rand/v2 is rand
	}
	return base
}

// layerMatch is the table row and pattern a package falls under.
type layerMatch struct {
	layer
	pattern string
}

// lookupLayer finds the most specific pattern of layerTable matching pkg.
func lookupLayer(pkg string) (layerMatch, bool) {
	var best layerMatch
	found := false
	for _, l := range layerTable {
		for _, p := range l.pkgs {
			if matchPattern(p, pkg) && (!found || len(p) > len(best.pattern)) {
				best, found = layerMatch{l, p}, true
			}
		}
	}
	return best, found
}

// matchPattern reports whether pkg is pattern, or under it when pattern
// ends in "/...".
func matchPattern(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matchPattern(p, pkg) })
}

// matchImport is matchAny over full import paths, where "$" stands for the
// module path.
func (c *checker) matchImport(patterns []string, imp string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		return matchPattern(strings.Replace(p, "$", c.module, 1), imp)
	})
}

// modulePath reads the module path from root/go.mod.
func modulePath(root string) (string, error) {
	fh, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", errors.New("no module line in go.mod")
}

// splitKnown separates findings exempted by known from the rest, and
// returns the entries of known that matched nothing.
func splitKnown(findings []finding, known []knownViolation) (rest []finding, stale []knownViolation) {
	used := make([]bool, len(known))
	for _, f := range findings {
		i := slices.IndexFunc(known, func(k knownViolation) bool {
			return k.pkg == f.pkg && k.rule == f.rule && k.subject == f.subject
		})
		if i < 0 {
			rest = append(rest, f)
			continue
		}
		used[i] = true
	}
	for i, k := range known {
		if !used[i] {
			stale = append(stale, k)
		}
	}
	return rest, stale
}

// TestLint checks the module this package is in.
func TestLint(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	module, err := modulePath(root)
	if err != nil {
		t.Fatal(err)
	}
	findings, err := check(root, module)
	if err != nil {
		t.Fatal(err)
	}
	rest, stale := splitKnown(findings, knownViolations)
	for _, f := range rest {
		t.Errorf("\n%s", f)
	}
	for _, k := range stale {
		t.Errorf("knownViolations entry {%s %s %s} (%s) matches nothing any more: delete it from internal/lint/lint_test.go",
			k.pkg, k.rule, k.subject, k.why)
	}
}

// TestLayerTable checks the table itself: every pattern appears once, and
// every "only" entry names lower layers.
func TestLayerTable(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range layerTable {
		for _, p := range l.pkgs {
			if seen[p] {
				t.Errorf("%s appears twice in layerTable", p)
			}
			seen[p] = true
		}
		for _, o := range l.only {
			m, ok := lookupLayer(strings.TrimSuffix(o, "/..."))
			if !ok || m.n >= l.n {
				t.Errorf("layer %d may import only %s, which is not on a lower layer", l.n, o)
			}
		}
	}
	for _, p := range slices.Concat(corePkgs, pebbleAllowed) {
		if _, ok := lookupLayer(strings.TrimSuffix(p, "/...")); !ok {
			t.Errorf("%s is not in layerTable", p)
		}
	}
}

// TestPlanted runs the checker over testdata/planted, a fake module whose
// files mark each line that must be reported with a trailing
// "// want: rule[,rule]" (or "/* want: rule */") comment, and requires exactly
// those findings.
func TestPlanted(t *testing.T) {
	root := filepath.Join("testdata", "planted")
	findings, err := check(root, "github.com/concord-kv/concord")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range findings {
		got[fmt.Sprintf("%s:%d %s", f.pos.Filename, f.pos.Line, f.rule)] = true
	}
	want, err := plantedWants(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 20 {
		t.Fatalf("only %d want comments under %s; the planted tree is incomplete", len(want), root)
	}
	for w := range want {
		if !got[w] {
			t.Errorf("not reported: %s", w)
		}
	}
	for _, f := range findings {
		if !want[fmt.Sprintf("%s:%d %s", f.pos.Filename, f.pos.Line, f.rule)] {
			t.Errorf("reported but not wanted:\n%s", f)
		}
	}
	if t.Failed() {
		return
	}
	// Every message carries its reason.
	for _, f := range findings {
		if !strings.Contains(f.msg, ": ") || len(f.msg) < 60 {
			t.Errorf("message without a reason: %s", f)
		}
	}
	// The same tree, but with a known violation exempted: the finding goes,
	// and an entry that matches nothing is stale.
	known := []knownViolation{
		{"internal/multiraft", rulePebble, pebblePath, "test"},
		{"internal/nothing", rulePebble, pebblePath, "test"},
	}
	rest, stale := splitKnown(findings, known)
	if len(rest) != len(findings)-1 {
		t.Errorf("known violation exempted %d findings, want 1", len(findings)-len(rest))
	}
	if len(stale) != 1 || stale[0].pkg != "internal/nothing" {
		t.Errorf("stale = %v, want the internal/nothing entry", stale)
	}
}

// plantedWants reads the "// want: rules" comments of every .go file under
// root (test files included, where a want would be a bug in the checker).
func plantedWants(root string) (map[string]bool, error) {
	want := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for i, line := range strings.Split(string(src), "\n") {
			_, rules, ok := strings.Cut(line, "want: ")
			if !ok {
				continue
			}
			rules, _, _ = strings.Cut(rules, "*/")
			for _, r := range strings.Split(strings.TrimSpace(rules), ",") {
				want[fmt.Sprintf("%s:%d %s", filepath.ToSlash(rel), i+1, strings.TrimSpace(r))] = true
			}
		}
		return nil
	})
	return want, err
}
