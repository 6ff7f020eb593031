"""lib739kv through Python's ctypes, used before and after fork.

Run by tests/kv739 (TestPythonFork) as: kv739_test.py LIB S1 S2 S3. The
parent initialises the library and uses it, then multiprocessing forks
four children that use it at once (their own connections and sessions),
and the parent goes on using it. Prints OK on success.
"""
import ctypes
import multiprocessing as mp
import os
import sys


def load(path, servers):
    lib = ctypes.CDLL(path)
    names = (ctypes.c_char_p * (len(servers) + 1))(*[s.encode() for s in servers], None)
    assert lib.kv739_init(names) == 0, "init"
    return lib


def put(lib, key, value):
    old = ctypes.create_string_buffer(2049)
    rc = lib.kv739_put(key.encode(), value.encode(), old)
    return rc, old.value.decode()


def get(lib, key):
    v = ctypes.create_string_buffer(2049)
    rc = lib.kv739_get(key.encode(), v)
    return rc, v.value.decode()


def child(i, prefix):
    lib = LIB  # inherited from the parent across fork, already initialised
    for j in range(20):
        rc, _ = put(lib, f"{prefix}-child{i}", f"v{j}")
        assert rc == (1 if j == 0 else 0), f"child {i} put {j}: {rc}"
    rc, v = get(lib, f"{prefix}-parent")
    assert rc == 0 and v == "p", f"child {i} read the parent's key: {rc} {v!r}"
    return i


if __name__ == "__main__":
    path, servers = sys.argv[1], sys.argv[2:]
    prefix = f"py{os.getpid()}"
    LIB = load(path, servers)
    assert put(LIB, f"{prefix}-parent", "p") == (1, ""), "first put"
    assert get(LIB, f"{prefix}-parent") == (0, "p"), "get"
    ctx = mp.get_context("fork")
    with ctx.Pool(4) as pool:
        done = pool.starmap(child, [(i, prefix) for i in range(4)])
    assert sorted(done) == [0, 1, 2, 3], done
    for i in range(4):
        assert get(LIB, f"{prefix}-child{i}") == (0, "v19"), f"child {i}'s last write"
    assert put(LIB, f"{prefix}-parent", "q") == (0, "p"), "parent after the children"
    assert LIB.kv739_shutdown() == 0
    print("OK")
