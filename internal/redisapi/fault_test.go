package redisapi

import (
	"errors"
	"strings"
	"testing"
)

// TestFaultDiskLow protects CONCORD.FAULT DISK-LOW ON|OFF, the RESP form
// of concord fault disk-low (Admin.DiskLow): ON and OFF (any case) reach
// the backend and answer OK; a backend refusal (the guard off) is the
// error and sets nothing; a malformed form names the forms and calls
// nothing; and with fault injection disabled nothing is called at all.
func TestFaultDiskLow(t *testing.T) {
	f := &fakeKV{counters: map[string]int64{}}
	c := serveOnSocket(t, New(f, Config{EnableFaultInjection: true}))
	for _, tc := range []struct{ cmd, want string }{
		{encodeArgs([]string{"CONCORD.FAULT", "DISK-LOW", "ON"}), `"OK"`},
		{encodeArgs([]string{"CONCORD.FAULT", "disk-low", "off"}), `"OK"`},
		{encodeArgs([]string{"CONCORD.FAULT", "DISK-LOW"}), "(error) ERR CONCORD.FAULT takes DIE CLEAN|UNCLEAN, PARTITION [addr...], HEAL or DISK-LOW ON|OFF"},
		{encodeArgs([]string{"CONCORD.FAULT", "DISK-LOW", "yes"}), "(error) ERR CONCORD.FAULT takes DIE CLEAN|UNCLEAN, PARTITION [addr...], HEAL or DISK-LOW ON|OFF"},
		{encodeArgs([]string{"CONCORD.FAULT", "DISK-LOW", "ON", "x"}), "(error) ERR CONCORD.FAULT takes DIE CLEAN|UNCLEAN, PARTITION [addr...], HEAL or DISK-LOW ON|OFF"},
	} {
		c.send(tc.cmd)
		if v := c.reply(); v.String() != tc.want {
			t.Fatalf("%q answered %+v; want %q", tc.cmd, v, tc.want)
		}
	}
	f.mu.Lock()
	got := strings.Join(f.log, "|")
	f.diskLowErr = errors.New("the disk space guard is off on this node")
	f.mu.Unlock()
	if got != "disk-low true|disk-low false" {
		t.Fatalf("backend calls %q; want the ON then the OFF only", got)
	}
	c.send(encodeArgs([]string{"CONCORD.FAULT", "DISK-LOW", "ON"}))
	if v := c.reply(); v.String() != "(error) ERR the disk space guard is off on this node" {
		t.Fatalf("DISK-LOW ON with the guard off answered %+v; want the refusal", v)
	}

	off := &fakeKV{counters: map[string]int64{}}
	c = serveOnSocket(t, New(off, Config{}))
	c.send(encodeArgs([]string{"CONCORD.FAULT", "DISK-LOW", "ON"}))
	v := c.reply()
	off.mu.Lock()
	defer off.mu.Unlock()
	if !strings.HasPrefix(v.String(), "(error) ERR fault injection is disabled") || len(off.log) != 0 {
		t.Fatalf("DISK-LOW ON without --enable-fault-injection answered %+v, calls %v; want refused, none", v, off.log)
	}
}
