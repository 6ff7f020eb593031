package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestIncrByFloatDifferential runs only the INCRBYFLOAT scripts of
// diffScripts (those whose name starts with "INCRBYFLOAT") against a real
// redis-server and a one-node Concord cluster, over RESP2: a quick way to
// measure INCRBYFLOAT's conformance alone. TestRedisServerDifferential runs
// the same scripts, with all the others, over both protocols.
func TestIncrByFloatDifferential(t *testing.T) {
	t.Parallel()
	bin := redisServerBinary(t)
	redisAddr := startRedisServer(t, bin)
	c := startCluster(t, testcluster.Options{Nodes: 1})
	awaitIncrFloatText(t, c)
	for i, s := range diffScripts {
		if strings.HasPrefix(s.name, "INCRBYFLOAT") {
			runDiffScript(t, s, 2, fmt.Sprintf("{f%d}", i), redisAddr, c.RedisAddr(0), c.RedisAddr(0))
		}
	}
}

// awaitIncrFloatText polls every node's Redis port until INCRBYFLOAT
// sends its increment as text: the node has learned that the cluster's
// version is version.IncrFloatText (heartbeats tell it, after the cluster
// is ready); before, it sends a double and cannot read "0x1".
func awaitIncrFloatText(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	for i := range c.N() {
		conn := dialDiff(t, c.RedisAddr(i))
		testcluster.WaitFor(t, readyTimeout, func() error {
			key := fmt.Sprintf("{probe}%d", i)
			conn.do(t, []string{"DEL", key})
			if r := conn.do(t, []string{"INCRBYFLOAT", key, "0x1"}); r.str != "1" {
				return fmt.Errorf("node %d: INCRBYFLOAT %s 0x1 = %s: the cluster's version is not IncrFloatText there yet", i, key, r)
			}
			return nil
		})
		conn.do(t, []string{"DEL", fmt.Sprintf("{probe}%d", i)})
		conn.close()
	}
}

// incrByFloatBroad is a broad INCRBYFLOAT script: repeated small
// increments, long double rounding and printing, more than 17 significant
// digits, signed zeros, the edges of a long double's range, and text that
// C's strtold and Go's parsers read differently.
var incrByFloatBroad = diffScript{"INCRBYFLOAT broad", append(append(
	repeatStep(`INCRBYFLOAT {t}a 0.1`, 20),
	`GET {t}a`,
	`SET {t}b 1e17`, `INCRBYFLOAT {t}b 1.5`, `INCRBYFLOAT {t}b 1.5`, `SET {t}b 100000000000000000000`, `INCRBYFLOAT {t}b 1.5`,
	`INCRBYFLOAT {t}c 3.0e-5`, `INCRBYFLOAT {t}c 3.0e-5`, `INCRBYFLOAT {t}c 3.0e-5`, `INCRBYFLOAT {t}c -9.0e-5`,
	`INCRBYFLOAT {t}d 1.2345678901234567890`, `INCRBYFLOAT {t}d 0.1234567890123456789`, `INCRBYFLOAT {t}d 12345678901234567890.5`,
	`INCRBYFLOAT {t}d 0.30000000000000004441`, `INCRBYFLOAT {t}d 9.99999999999999999999`, `INCRBYFLOAT {t}d -12345678901234567890.12345678901234567890`,
	`INCRBYFLOAT {t}e 3.0000000000000001`, `INCRBYFLOAT {t}e 0.00000000000000000001`, `INCRBYFLOAT {t}e 18446744073709551617`,
	`SET {t}f 5.0e3`, `INCRBYFLOAT {t}f 10.5`, `INCRBYFLOAT {t}f "10.5"`,
	`INCRBYFLOAT {t}z -0`, `INCRBYFLOAT {t}z -0.0`, `SET {t}z -0`, `INCRBYFLOAT {t}z -0`, `SET {t}z -0.0`, `INCRBYFLOAT {t}z 0`, `SET {t}z 1`, `INCRBYFLOAT {t}z -1`,
	`SET {t}h 1.7976931348623157e308`, `INCRBYFLOAT {t}h 1.7976931348623157e308`, `INCRBYFLOAT {t}h 1e4932`, `SET {t}h 1.18e4932`, `INCRBYFLOAT {t}h 0`,
	`INCRBYFLOAT {t}h 1e4931`, `SET {t}h 1.19e4932`, `INCRBYFLOAT {t}h 0`, `SET {t}h -1.18e4932`, `INCRBYFLOAT {t}h -1e4931`,
	`INCRBYFLOAT {t}i 1e400`, `INCRBYFLOAT {t}i -1e400`, `SET {t}i 1e400`, `INCRBYFLOAT {t}i 1`, `INCRBYFLOAT {t}i 1e400`, `INCRBYFLOAT {t}i -1e400`, `GET {t}i`,
	`INCRBYFLOAT {t}j inf`, `INCRBYFLOAT {t}j -inf`, `INCRBYFLOAT {t}j nan`, `INCRBYFLOAT {t}j -nan`, `INCRBYFLOAT {t}j nan(1)`, `INCRBYFLOAT {t}j Infinity`,
	`SET {t}j inf`, `INCRBYFLOAT {t}j 1`, `SET {t}j -inf`, `INCRBYFLOAT {t}j 1`, `SET {t}j nan`, `INCRBYFLOAT {t}j 1`, `SET {t}j Inf`, `INCRBYFLOAT {t}j inf`,
	`INCRBYFLOAT {t}k " 1"`, `INCRBYFLOAT {t}k "1 "`, `INCRBYFLOAT {t}k "\t1"`, `INCRBYFLOAT {t}k "1\n"`, `INCRBYFLOAT {t}k "\n1"`, `INCRBYFLOAT {t}k "1\x00"`,
	`SET {t}k " 1"`, `INCRBYFLOAT {t}k 1`, `SET {t}k "1 "`, `INCRBYFLOAT {t}k 1`, `SET {t}k "\v1"`, `INCRBYFLOAT {t}k 1`,
	`INCRBYFLOAT {t}x 0x10`, `INCRBYFLOAT {t}x 0X10`, `INCRBYFLOAT {t}x -0x10`, `INCRBYFLOAT {t}x 0x1p3`, `INCRBYFLOAT {t}x 0x1.8p1`, `INCRBYFLOAT {t}x 0x.8`,
	`INCRBYFLOAT {t}x 0x1p-3`, `INCRBYFLOAT {t}x 0x1p99999`, `INCRBYFLOAT {t}x 0x`, `INCRBYFLOAT {t}x 0x1g`, `GET {t}x`,
	`SET {t}x 0x10`, `INCRBYFLOAT {t}x 1`, `SET {t}x 0x1.8p1`, `INCRBYFLOAT {t}x 0.5`,
	`INCRBYFLOAT {t}p 1p3`, `INCRBYFLOAT {t}p 1e5p2`, `INCRBYFLOAT {t}p 1P3`, `INCRBYFLOAT {t}p e5`, `INCRBYFLOAT {t}p .`, `INCRBYFLOAT {t}p +`,
	`INCRBYFLOAT {t}p -`, `INCRBYFLOAT {t}p +-1`, `INCRBYFLOAT {t}p 0001.5`, `INCRBYFLOAT {t}p 1,5`, `INCRBYFLOAT {t}p 1e+`, `INCRBYFLOAT {t}p 1.5e-0`,
	`INCRBYFLOAT {t}p 00`, `INCRBYFLOAT {t}p -.0e-99999`, `INCRBYFLOAT {t}p 1e99999999999999999999`, `INCRBYFLOAT {t}p 1e-99999999999999999999`, `GET {t}p`,
	`SET {t}p 1p3`, `INCRBYFLOAT {t}p 1`,
	`SET {t}s 1e-4940`, `INCRBYFLOAT {t}s 0`, `SET {t}s 1e-4950`, `INCRBYFLOAT {t}s 0`, `SET {t}s 1e-4952`, `INCRBYFLOAT {t}s 0`,
	`INCRBYFLOAT {t}s 1e-4940`, `INCRBYFLOAT {t}s 1e-4952`, `INCRBYFLOAT {t}s 1e-320`,
	`SET {t}r 0.000003814697265625`, `INCRBYFLOAT {t}r 0`, `SET {t}r 0.000011444091796875`, `INCRBYFLOAT {t}r 0`,
	`SET {t}r 1.1`, `INCRBYFLOAT {t}r 2.2`, `SET {t}r 0.33333333333333333333`, `INCRBYFLOAT {t}r 0.33333333333333333333`,
	`SET {t}r 2.5e-7`, `INCRBYFLOAT {t}r 0`, `SET {t}r 1e300`, `INCRBYFLOAT {t}r 1`, `SET {t}r 9223372036854775808`, `INCRBYFLOAT {t}r 1`,
	`SET {t}r 1e19`, `INCRBYFLOAT {t}r 1`, `INCRBYFLOAT {t}r 0.5`, `SET {t}r 123.456`, `INCRBYFLOAT {t}r -123.456`,
	`INCRBYFLOAT {t}r 1e-17`, `INCRBYFLOAT {t}r 5e-18`, `INCRBYFLOAT {t}r 4e-18`,
), longFloatSteps()...)}

// repeatStep is step n times.
func repeatStep(step string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = step
	}
	return out
}

// longFloatSteps are numbers around the 5 KiB that Redis's string2ld reads
// at most, as an increment and as a stored value.
func longFloatSteps() []string {
	short := "0." + strings.Repeat("0", 5100) + "1" // 5,103 bytes
	long := "0." + strings.Repeat("0", 5200) + "1"  // 5,203 bytes
	return []string{
		`INCRBYFLOAT {t}l ` + short, `INCRBYFLOAT {t}l ` + long, `SET {t}l ` + long, `INCRBYFLOAT {t}l 1`,
		`SET {t}l ` + short, `INCRBYFLOAT {t}l 1`,
	}
}
