package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorsReadAsSentences(t *testing.T) {
	limit := status.Error(codes.InvalidArgument, "key is 5000 bytes; the limit is 4096 (--max-key-bytes)")
	dial := fmt.Errorf("concord: no node answered with a routing table: %w", status.Error(codes.Unavailable,
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`))
	for _, tc := range []struct {
		err      error
		text     string
		code     codes.Code
		jsonMode bool
	}{
		{err: limit, text: "key is 5000 bytes; the limit is 4096 (--max-key-bytes)", code: codes.InvalidArgument},
		{err: limit, text: "key is 5000 bytes; the limit is 4096 (--max-key-bytes)", code: codes.InvalidArgument, jsonMode: true},
		{err: dial, text: "concord: no node answered with a routing table: dial tcp 127.0.0.1:1: connect: connection refused", code: codes.Unavailable, jsonMode: true},
		{err: fmt.Errorf("cas takes KEY OLD NEW"), text: "cas takes KEY OLD NEW", code: codes.Unknown},
	} {
		cmd := &cobra.Command{}
		var f clientFlags
		addClientFlags(cmd, &f)
		if tc.jsonMode {
			_ = cmd.Flags().Set("output", "json")
		}
		var out, errOut bytes.Buffer
		reportError(&out, &errOut, cmd, tc.err)
		if !tc.jsonMode {
			if got, want := errOut.String(), "error: "+tc.text+"\n"; got != want || out.Len() != 0 {
				t.Errorf("text: stderr %q stdout %q, want stderr %q", got, out.String(), want)
			}
			continue
		}
		var doc struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil || errOut.Len() != 0 {
			t.Fatalf("json: %q (%v), stderr %q", out.String(), err, errOut.String())
		}
		if doc.Error.Code != tc.code.String() || doc.Error.Message != tc.text {
			t.Errorf("json: %+v, want code %s message %q", doc.Error, tc.code, tc.text)
		}
	}
}
