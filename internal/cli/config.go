package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Settings come from three places besides defaults. For each flag, the
// first that has it wins:
//
//  1. the command line (--shards 32);
//  2. the environment: CONCORD_ and the flag's name in capitals with _ for
//     - (CONCORD_SHARDS=32, CONCORD_SUSPECT_AFTER=10s);
//  3. the YAML file given with --config, keyed by flag name
//     (shards: 32, peers: [a:7001, b:7001], suspect-after: 10s).
//
// A key in the file that is no flag of the command is an error (a typo
// must not be ignored silently); so is a value the flag cannot parse.

// envPrefix starts the environment variable of every flag.
const envPrefix = "CONCORD_"

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applySettings fills the flags of cmd that the command line left unset
// from the environment (lookup) and then from the YAML file at path ("":
// none).
func applySettings(cmd *cobra.Command, path string, lookup func(string) (string, bool)) error {
	flags := cmd.Flags()
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v, ok := lookup(envName(f.Name)); ok {
			if e := flags.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
		}
	})
	if err != nil || path == "" {
		return err
	}
	file, err := readConfigFile(path)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(file))
	for k := range file {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := flags.Lookup(k)
		if f == nil || k == "config" || k == "help" {
			return fmt.Errorf("config file %s: unknown setting %q (settings are the flags of `concord %s`, without the dashes)", path, k, cmd.Name())
		}
		if f.Changed {
			continue // the command line or the environment said otherwise
		}
		if err := flags.Set(k, file[k]); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return nil
}

// readConfigFile reads a YAML mapping of flag names to values; a list
// becomes the comma-separated string the flag takes.
func readConfigFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		s, err := settingString(v)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
		out[k] = s
	}
	return out, nil
}

func settingString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := settingString(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", fmt.Errorf("a mapping is not a value")
	default:
		return fmt.Sprint(v), nil
	}
}

// withSettings makes cmd read its unset flags from the environment and
// from --config before it runs.
func withSettings(cmd *cobra.Command) *cobra.Command {
	var path string
	cmd.Flags().StringVar(&path, "config", "", "YAML file of settings keyed by flag name (e.g. shards: 32); the command line, then CONCORD_* environment variables take precedence")
	pre := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := applySettings(cmd, path, os.LookupEnv); err != nil {
			return err
		}
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
	return cmd
}
