package version

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestOperationsDocListsEveryLevel: docs/operations.md's cluster-version
// table ("Upgrades and rolling restarts") has one row per level from Base
// to Binary, in order, and only Binary's row says it is "this one" (the
// current binary's level).
func TestOperationsDocListsEveryLevel(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	const header = "| level | what it allows | binaries |"
	start := strings.Index(doc, header)
	if start < 0 {
		t.Fatalf("docs/operations.md has no %q table", header)
	}
	table := doc[start:]
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	rows := strings.Split(table, "\n")[2:] // past the header and the |---| line
	if len(rows) != int(Binary-Base)+1 {
		t.Errorf("the table has %d rows, want one per level %d..%d", len(rows), Base, Binary)
	}
	for i, row := range rows {
		want := Base + Level(i)
		if !strings.HasPrefix(row, fmt.Sprintf("| %d | ", want)) {
			t.Errorf("row %d is %.40q..., want level %d", i+1, row, want)
		}
		if this := strings.HasSuffix(row, "| this one |"); this != (want == Binary) {
			t.Errorf("level %d's row says \"this one\": %v; the binary's level is %d", want, this, Binary)
		}
	}
}
