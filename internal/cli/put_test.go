package cli

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
)

// TestPrintPut protects what `concord put` prints: OK for a blind put; with
// --prev the previous value or "(none)"; JSON carries the previous value
// only when it was asked for (without --prev the node did not read it, so
// a prev_exists of false would be a lie).
func TestPrintPut(t *testing.T) {
	for _, tc := range []struct {
		json, prev, existed bool
		old                 string
		want                string
	}{
		{false, false, false, "", "OK\n"},
		{false, true, true, "v0", "v0\n"},
		{false, true, false, "", "(none)\n"},
		{true, false, false, "", "{\n  \"ok\": true\n}\n"},
		{true, true, true, "v0", "{\n  \"ok\": true,\n  \"prev_exists\": true,\n  \"prev_value\": \"v0\"\n}\n"},
	} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		if err := printPut(cmd, tc.json, tc.prev, []byte(tc.old), tc.existed); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.want {
			t.Errorf("printPut(json %v, prev %v, existed %v, %q) printed %q, want %q", tc.json, tc.prev, tc.existed, tc.old, out.String(), tc.want)
		}
	}
}

// TestPrintAvailableWrite protects what `concord put --available` and
// `concord del --available` print: OK for a committed write, and for a
// tentative one which node holds it; JSON says tentative either way.
func TestPrintAvailableWrite(t *testing.T) {
	for _, tc := range []struct {
		json   bool
		heldBy uint64
		want   string
	}{
		{false, 0, "OK\n"},
		{false, 3, "OK (tentative: held by node 3 until its shard has a quorum)\n"},
		{true, 0, "{\n  \"key\": \"k\",\n  \"ok\": true,\n  \"tentative\": false\n}\n"},
		{true, 3, "{\n  \"held_by\": 3,\n  \"key\": \"k\",\n  \"ok\": true,\n  \"tentative\": true\n}\n"},
	} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		if err := printAvailableWrite(cmd, tc.json, []byte("k"), tc.heldBy); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.want {
			t.Errorf("printAvailableWrite(json %v, held by %d) printed %q, want %q", tc.json, tc.heldBy, out.String(), tc.want)
		}
	}
}
