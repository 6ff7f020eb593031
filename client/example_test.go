package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
)

// The examples run against a real 3-node cluster; endpoints() returns its
// nodes' addresses (in a program of yours, your nodes' addresses).

// Connect, write, read, delete, close.
func Example() {
	ctx := context.Background()
	// Any subset of the nodes will do: the client learns the others from
	// the routing table.
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, _, err := c.Put(ctx, []byte("greeting"), []byte("hello")); err != nil {
		log.Fatal(err)
	}
	v, found, err := c.Get(ctx, []byte("greeting"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("found=%v value=%s\n", found, v)

	existed, err := c.Delete(ctx, []byte("greeting"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted, existed:", existed)

	// A missing key is not an error: found is false.
	_, found, err = c.Get(ctx, []byte("greeting"))
	fmt.Println("found after delete:", found, "err:", err)
	// Output:
	// found=true value=hello
	// deleted, existed: true
	// found after delete: false err: <nil>
}

// Options beyond the endpoints: per-attempt timeout, wire, TLS and the
// cluster's auth token.
func ExampleNewWithOptions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := client.Options{
		Endpoints: endpoints(),
		// Each attempt (one RPC to one node) gives up after this, and the
		// call tries another node within its deadline. Zero: a third of
		// the call's deadline, between 0.5 and 2 s.
		AttemptTimeout: time.Second,
		// For a cluster started with --tls-ca, --tls-cert and --tls-key:
		//   TLSCAFile: "ca.crt",                          // trust the nodes' CA
		//   TLSCertFile: "client.crt", TLSKeyFile: "client.key", // a client certificate, if the nodes ask for one
		// For a cluster started with --auth-token-file:
		//   AuthToken: strings.TrimSpace(string(tokenFileBytes)),
	}
	c, err := client.NewWithOptions(ctx, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Put(ctx, []byte("options"), []byte("ok")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("connected and wrote")

	// A token read from a file without trimming its newline is refused at
	// once, before any connection, with an error that names the option
	// (and never quotes the token).
	opts.AuthToken = "s3cret\n"
	_, err = client.NewWithOptions(ctx, opts)
	fmt.Println("untrimmed token refused:", err != nil && strings.Contains(err.Error(), "Options.AuthToken"))
	// Output:
	// connected and wrote
	// untrimmed token refused: true
}

// A Put is a blind write by default: the shard does not read the key.
// ReturnPrev asks for the value it replaced.
func ExampleClient_Put() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	prev, existed, err := c.Put(ctx, []byte("put/k"), []byte("v1"))
	fmt.Printf("blind: prev=%q existed=%v err=%v\n", prev, existed, err)
	prev, existed, err = c.Put(ctx, []byte("put/k"), []byte("v2"), client.ReturnPrev())
	fmt.Printf("with ReturnPrev: prev=%q existed=%v err=%v\n", prev, existed, err)

	// Bad input (an empty key, a key or value over the cluster's limits)
	// is refused with InvalidArgument, at once, and changes nothing.
	_, _, err = c.Put(ctx, nil, []byte("v"))
	fmt.Println("empty key:", status.Code(err))
	// Output:
	// blind: prev="" existed=false err=<nil>
	// with ReturnPrev: prev="v1" existed=true err=<nil>
	// empty key: InvalidArgument
}

// A key written with TTL expires: GetWithExpiry says when, and once that
// time has passed the key does not exist. A Put without TTL clears it.
func ExampleTTL() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	before := time.Now()
	if _, _, err := c.Put(ctx, []byte("ttl/session"), []byte("token"), client.TTL(time.Hour)); err != nil {
		log.Fatal(err)
	}
	_, expireAt, found, err := c.GetWithExpiry(ctx, []byte("ttl/session"))
	if err != nil {
		log.Fatal(err)
	}
	// The expiry is stamped by the shard's leader, on its clock.
	inAnHour := expireAt.After(before.Add(59*time.Minute)) && expireAt.Before(time.Now().Add(61*time.Minute))
	fmt.Println("found:", found, "expires in about an hour:", inAnHour)

	if _, _, err := c.Put(ctx, []byte("ttl/session"), []byte("token")); err != nil {
		log.Fatal(err)
	}
	_, expireAt, _, _ = c.GetWithExpiry(ctx, []byte("ttl/session"))
	fmt.Println("after a Put without TTL, no expiry:", expireAt.IsZero())

	// A short TTL: poll until the key is gone.
	if _, _, err := c.Put(ctx, []byte("ttl/short"), []byte("x"), client.TTL(100*time.Millisecond)); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, found, err := c.Get(ctx, []byte("ttl/short"))
		if err != nil {
			log.Fatal(err)
		}
		if !found {
			fmt.Println("short-lived key expired")
			break
		}
		if time.Now().After(deadline) {
			log.Fatal("the key did not expire")
		}
	}
	// Output:
	// found: true expires in about an hour: true
	// after a Put without TTL, no expiry: true
	// short-lived key expired
}

// CompareAndSwap replaces a value only if it is still the one expected;
// otherwise it reports what is there now, for the caller to decide again.
func ExampleClient_CompareAndSwap() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	key := []byte("cas/balance")
	if _, _, err := c.Put(ctx, key, []byte("100")); err != nil {
		log.Fatal(err)
	}

	res, err := c.CompareAndSwap(ctx, key, client.CAS{Expected: []byte("100"), Value: []byte("70")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("swapped=%v (was %s)\n", res.Swapped, res.CurrentValue)

	// A second writer that still expects 100 loses, and learns the value.
	res, err = c.CompareAndSwap(ctx, key, client.CAS{Expected: []byte("100"), Value: []byte("50")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("swapped=%v current=%s\n", res.Swapped, res.CurrentValue)

	// Delete instead of storing: only if it still holds 70.
	res, err = c.CompareAndSwap(ctx, key, client.CAS{Expected: []byte("70"), Delete: true})
	if err != nil {
		log.Fatal(err)
	}
	_, found, _ := c.Get(ctx, key)
	fmt.Printf("deleted=%v found=%v\n", res.Swapped, found)
	// Output:
	// swapped=true (was 100)
	// swapped=false current=70
	// deleted=true found=false
}

// ExpectAbsent creates a key only if it does not exist: the first of
// several clients to try wins (a lock, a unique name).
func ExampleClient_CompareAndSwap_absent() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	key := []byte("cas/lock")

	for _, owner := range []string{"worker-1", "worker-2"} {
		res, err := c.CompareAndSwap(ctx, key, client.CAS{ExpectAbsent: true, Value: []byte(owner)})
		if err != nil {
			log.Fatal(err)
		}
		if res.Swapped {
			fmt.Println(owner, "took the lock")
		} else {
			fmt.Printf("%s: held by %s\n", owner, res.CurrentValue)
		}
	}

	// Release it only if it is still ours (it may have been taken over).
	res, err := c.CompareAndSwap(ctx, key, client.CAS{Expected: []byte("worker-1"), Delete: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", res.Swapped)
	// Output:
	// worker-1 took the lock
	// worker-2: held by worker-1
	// released: true
}

// A Batch applies its ops atomically, all in one shard. Keys that share a
// {hash tag} are in one shard whatever the rest of the key: here
// everything about user 42. Each op has its own result, and may fail
// alone (client.OpErr).
func ExampleClient_Batch() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	results, err := c.Batch(ctx, []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte("{user:42}:name"), Value: []byte("Ada")},
		{Type: concordpb.OpType_OP_INCR, Key: []byte("{user:42}:visits"), IntDelta: 1},
		{Type: concordpb.OpType_OP_INCR, Key: []byte("{user:42}:name"), IntDelta: 1}, // not a number
		{Type: concordpb.OpType_OP_GET, Key: []byte("{user:42}:name")},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("visits:", results[1].GetIntValue())
	fmt.Println("incr of a name:", client.OpErr(results[2]))
	fmt.Printf("name: %s (found=%v)\n", results[3].GetValue(), results[3].GetOk())

	// Keys without a common tag are most likely in different shards; such
	// a batch is refused (InvalidArgument) and changes nothing.
	var cross []*concordpb.Op
	for i := range 20 {
		cross = append(cross, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(fmt.Sprintf("batch/%d", i)), Value: []byte("x")})
	}
	_, err = c.Batch(ctx, cross)
	fmt.Println("across shards:", status.Code(err))

	// Forget the user: both keys in one batch. A DELETE's Ok says the key
	// existed.
	results, err = c.Batch(ctx, []*concordpb.Op{
		{Type: concordpb.OpType_OP_DELETE, Key: []byte("{user:42}:name")},
		{Type: concordpb.OpType_OP_DELETE, Key: []byte("{user:42}:visits")},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", results[0].GetOk(), results[1].GetOk())
	// Output:
	// visits: 1
	// incr of a name: concord: the value is not an integer
	// name: Ada (found=true)
	// across shards: InvalidArgument
	// deleted: true true
}

// Scan returns the pairs of a key range in key order, across every shard,
// fetching as many pages as it needs; limit bounds how many.
func ExampleClient_Scan() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, fruit := range []string{"cherry", "apple", "banana", "date"} {
		if _, _, err := c.Put(ctx, []byte("fruit/"+fruit), []byte(strings.ToUpper(fruit[:1]))); err != nil {
			log.Fatal(err)
		}
	}

	// [fruit/, fruit0): every key with the prefix "fruit/" ('0' follows '/').
	kvs, err := c.Scan(ctx, []byte("fruit/"), []byte("fruit0"), 3)
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range kvs {
		fmt.Printf("%s=%s\n", kv.Key, kv.Value)
	}
	// Output:
	// fruit/apple=A
	// fruit/banana=B
	// fruit/cherry=C
}

// ScanPage reads one page at a time: go on from NextStart while More is
// set. Each page is its own read; a key written between pages may or may
// not be seen.
func ExampleClient_ScanPage() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		if _, _, err := c.Put(ctx, []byte(fmt.Sprintf("page/%d", i)), []byte("v")); err != nil {
			log.Fatal(err)
		}
	}

	start, end := []byte("page/"), []byte("page0")
	for page := 1; ; page++ {
		resp, err := c.ScanPage(ctx, start, end, 2)
		if err != nil {
			log.Fatal(err)
		}
		var keys []string
		for _, kv := range resp.GetKvs() {
			keys = append(keys, string(kv.GetKey()))
		}
		fmt.Println("page", page, keys)
		if !resp.GetMore() {
			break
		}
		start = resp.GetNextStart()
	}
	// Output:
	// page 1 [page/0 page/1]
	// page 2 [page/2 page/3]
	// page 3 [page/4]
}

// A stale read is served by the replica on the node the client was given,
// without asking the shard's leader: fast, available without a quorum,
// and possibly behind the latest write. Poll when you need to see one.
func ExampleStale() {
	ctx := context.Background()
	writer, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Close()
	// A client of one node reads that node's replica.
	local, err := client.New(ctx, endpoints()[2])
	if err != nil {
		log.Fatal(err)
	}
	defer local.Close()

	if _, _, err := writer.Put(ctx, []byte("stale/config"), []byte("v2")); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, _, err := local.Get(ctx, []byte("stale/config"), client.Stale())
		if err != nil {
			log.Fatal(err)
		}
		if string(v) == "v2" {
			fmt.Println("the replica has caught up:", string(v))
			break
		}
		if time.Now().After(deadline) {
			log.Fatal("the replica did not catch up")
		}
	}
	// Output:
	// the replica has caught up: v2
}

// Every call retries (leader changes, a node down) until its context's
// deadline, client.DefaultTimeout if it has none. When the deadline
// passes, the error wraps context.DeadlineExceeded; for a write, check
// client.ErrAmbiguous first (see the package's "ambiguous" example).
func ExampleClient_Get_deadline() {
	c, err := client.New(context.Background(), endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, _, err := c.Get(ctx, []byte("deadline/k")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("answered within the second")

	spent, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, _, err = c.Get(spent, []byte("deadline/k"))
	fmt.Println("past its deadline:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// answered within the second
	// past its deadline: true
}

// A write whose outcome the client cannot know fails with an error
// wrapping ErrAmbiguous: an attempt reached a node and no answer came back
// before the deadline, so it may or may not have applied. It applies at
// most once (the call's retries share one session and sequence number),
// never twice. What to do: follow it with a write that is harmless either
// way, a Put of the same value, or a CompareAndSwap from the value you had
// read (if the first one applied, the repeat does not swap, and reports
// your value as the current one); not an INCR. A read tells you that it
// applied, not that it never will: a write still in flight in the cluster
// may apply later. Reads never report ErrAmbiguous: they change nothing,
// so repeat them.
//
// Here the client reaches the cluster through a proxy that holds back the
// node's replies for a while, as a network losing them would.
func Example_ambiguous() {
	proxy, err := newReplyHolder(endpoints()[0])
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()
	ctx := context.Background()
	c, err := client.NewWithOptions(ctx, client.Options{
		Endpoints:        []string{proxy.Addr()},
		ThroughEndpoints: true, // every request through the proxy
		AttemptTimeout:   200 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	key := []byte("ambiguous/k")
	if _, _, err := c.Put(ctx, key, []byte("v1")); err != nil {
		log.Fatal(err)
	}

	proxy.Hold()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	_, _, err = c.Put(wctx, key, []byte("v2"))
	cancel()
	fmt.Println("write: ambiguous:", errors.Is(err, client.ErrAmbiguous), "deadline:", errors.Is(err, context.DeadlineExceeded))
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	_, _, err = c.Get(rctx, key)
	cancel()
	fmt.Println("read:  ambiguous:", errors.Is(err, client.ErrAmbiguous), "deadline:", errors.Is(err, context.DeadlineExceeded))
	proxy.Release()

	// The write's outcome is unknown. Putting the same value again is
	// harmless whether or not it applied.
	if _, _, err := c.Put(ctx, key, []byte("v2")); err != nil {
		log.Fatal(err)
	}
	v, _, err := c.Get(ctx, key)
	fmt.Printf("value: %s, err: %v\n", v, err)
	// Output:
	// write: ambiguous: true deadline: true
	// read:  ambiguous: false deadline: true
	// value: v2, err: <nil>
}

// A batch of GETs whose values would pass 64 MiB, what one read may
// return, is refused with ResourceExhausted ("reply too large"): read
// fewer keys at a time. (Each GET counts, a repeated key too.)
func ExampleClient_Batch_tooLarge() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	big := bytes.Repeat([]byte("x"), 1<<20) // the largest value by default (--max-value-bytes)
	if _, _, err := c.Put(ctx, []byte("big/1"), big); err != nil {
		log.Fatal(err)
	}

	var gets []*concordpb.Op
	for range 65 {
		gets = append(gets, &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte("big/1")})
	}
	start := time.Now()
	_, err = c.Batch(ctx, gets)
	fmt.Println("65 MiB:", status.Code(err), "at once:", time.Since(start) < time.Second)

	results, err := c.Batch(ctx, gets[:16])
	fmt.Println("16 MiB:", len(results), "values, err:", err)
	// Output:
	// 65 MiB: ResourceExhausted at once: true
	// 16 MiB: 16 values, err: <nil>
}

// Close ends the client's connections; a call made after it fails with
// ErrClosed.
func ExampleClient_Close() {
	ctx := context.Background()
	c, err := client.New(ctx, endpoints()...)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	_, _, err = c.Get(ctx, []byte("closed/k"))
	fmt.Println(errors.Is(err, client.ErrClosed))
	// Output:
	// true
}
