package cli

import (
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/client"
)

// CLI errors read as sentences: the gRPC wrapping ("rpc error: code =
// InvalidArgument desc = ...") that the server's message travels in is
// taken off, and with --output json the error is a JSON object on standard
// output that carries the code, for scripts:
//
//	error: key is 5000 bytes; the limit is 4096 (--max-key-bytes)
//	{"error": {"code": "InvalidArgument", "message": "key is 5000 bytes; ..."}}

var (
	rpcWrapping  = regexp.MustCompile(`rpc error: code = \w+ desc = `)
	dialWrapping = regexp.MustCompile(`connection error: desc = "transport: (?:Error while dialing: )?([^"]*)"`)
)

// errorText is err's message without gRPC's wrapping.
func errorText(err error) string {
	msg := rpcWrapping.ReplaceAllString(err.Error(), "")
	return dialWrapping.ReplaceAllString(msg, "$1")
}

// errorCode is the gRPC code err carries anywhere in its chain, else
// Unknown (a usage or local error: "InvalidArgument" if it is the
// command line's).
func errorCode(err error) codes.Code {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return codes.Unknown
}

// reportError prints err for a person (stderr) or, when cmd was asked for
// JSON, as an object on stdout.
func reportError(stdout, stderr io.Writer, cmd *cobra.Command, err error) {
	msg := errorText(err)
	if cmd != nil {
		if f := cmd.Flags().Lookup("output"); f != nil && f.Value.String() == "json" {
			e := map[string]any{"code": errorCode(err).String(), "message": msg}
			if errors.Is(err, client.ErrAmbiguous) {
				// The code is the last attempt's (Unavailable after a
				// failover that outlasted --timeout): a script that
				// retries on it must see that the write may have applied.
				e["ambiguous"] = true
			}
			_ = printJSON(stdout, map[string]any{"error": e})
			return
		}
	}
	fmt.Fprintln(stderr, "error:", msg)
}
