package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/internal/certs"
)

func newCertsCmd() *cobra.Command {
	var dir, hosts string
	var days int
	var force bool
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a development CA, a node certificate and a client certificate",
		Long: "Create, in --dir, a self-signed CA (ca.crt, ca.key), one node certificate (node.crt, node.key)\n" +
			"valid for serving and for peer traffic, for every name and address in --hosts, and one client\n" +
			"certificate (client.crt, client.key). All ECDSA P-256; keys are written 0600. Existing files are\n" +
			"never replaced without --force. Start every node with\n" +
			"  --tls-cert DIR/node.crt --tls-key DIR/node.key --tls-ca DIR/ca.crt\n" +
			"and give clients --tls-ca DIR/ca.crt.",
		Args: argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return fmt.Errorf("--dir is required")
			}
			written, err := certs.Generate(dir, certs.Options{Hosts: strings.Split(hosts, ","), Days: days, Force: force})
			if err != nil {
				return err
			}
			for _, w := range written {
				fmt.Fprintln(cmd.OutOrStdout(), "wrote", w)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Nodes:   --tls-cert %s --tls-key %s --tls-ca %s\nClients: --tls-ca %s\n",
				filepath.Join(dir, certs.NodeFile), filepath.Join(dir, certs.NodeKey), filepath.Join(dir, certs.CAFile),
				filepath.Join(dir, certs.CAFile))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write the files into (created if missing)")
	f.StringVar(&hosts, "hosts", strings.Join(certs.DefaultHosts, ","), "comma-separated IP addresses and DNS names the node certificate is valid for (every address clients and peers dial)")
	f.IntVar(&days, "days", certs.DefaultDays, "days the certificates are valid")
	f.BoolVar(&force, "force", false, "replace existing files (a new CA: every node and client must get the new files)")
	return cmd
}
