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
