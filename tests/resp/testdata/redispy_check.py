"""redis-py against one Concord node's Redis port: RESP2 and RESP3.

Run by TestRedisPy (redispy_test.go) with the port as its argument; exits
non-zero, with the failing check, if anything differs.
"""
import sys

import redis


def check(proto, port):
    r = redis.Redis(host="127.0.0.1", port=port, protocol=proto, decode_responses=False)
    p = b"py%d:" % proto
    assert r.ping() is True
    assert r.set(p + b"k", b"v\x00\r\n") is True
    assert r.get(p + b"k") == b"v\x00\r\n"
    assert r.get(p + b"missing") is None
    assert r.set(p + b"k", b"w", nx=True) is None
    assert r.set(p + b"k", b"w", xx=True, get=True) == b"v\x00\r\n"
    assert r.incr(p + b"n") == 1
    assert r.incrby(p + b"n", 9) == 10
    assert r.incrbyfloat(p + b"f", 2.5) == 2.5
    assert r.append(p + b"k", b"x") == 2
    r.mset({p + b"a": b"1", p + b"b": b"2"})
    assert r.mget([p + b"a", p + b"missing", p + b"b"]) == [b"1", None, b"2"]
    assert r.exists(p + b"a", p + b"b") == 2
    assert r.expire(p + b"a", 100) is True
    assert 0 < r.ttl(p + b"a") <= 100
    assert r.persist(p + b"a") is True
    assert r.delete(p + b"a", p + b"b") == 2
    pipe = r.pipeline(transaction=False)
    for i in range(200):
        pipe.set(p + b"pipe:%d" % i, i)
    for i in range(200):
        pipe.get(p + b"pipe:%d" % i)
    out = pipe.execute()
    assert out[200:] == [str(i).encode() for i in range(200)], out[200:210]
    keys = sorted(r.scan_iter(match=p + b"pipe:*", count=50))
    assert len(keys) == 200, len(keys)
    try:
        r.execute_command("NOSUCH")
        raise AssertionError("unknown command accepted")
    except redis.ResponseError as e:
        assert str(e).startswith("unknown command"), str(e)
    # WATCH through redis-py's transaction helper, over keys sharing a hash tag.
    acct, log = p + b"{acct}:bal", p + b"{acct}:log"
    r.set(acct, 10)

    def pay(pipe):
        bal = int(pipe.get(acct))
        pipe.multi()
        pipe.set(acct, bal - 3)
        pipe.append(log, b"-3;")

    r.transaction(pay, acct)
    assert r.mget([acct, log]) == [b"7", b"-3;"], r.mget([acct, log])
    # A watched key written by another connection: EXEC answers null, which
    # redis-py raises as WatchError, and nothing applies.
    other = redis.Redis(host="127.0.0.1", port=port, protocol=proto)
    with r.pipeline() as pipe:
        pipe.watch(acct)
        other.set(acct, 100)
        pipe.multi()
        pipe.set(acct, 0)
        pipe.set(log, b"lost")
        try:
            pipe.execute()
            raise AssertionError("EXEC applied although a watched key changed")
        except redis.WatchError:
            pass
    assert r.mget([acct, log]) == [b"100", b"-3;"], r.mget([acct, log])
    info = r.info()
    assert "redis_version" in info and "connected_clients" in info, info
    r.client_setname("pyclient")
    assert r.client_getname() in ("pyclient", b"pyclient")


if __name__ == "__main__":
    port = int(sys.argv[1])
    check(2, port)
    check(3, port)
    print("redis-py %s: ok" % redis.__version__)
