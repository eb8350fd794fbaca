#!/usr/bin/env python3
"""redis-py's bf() commands against a freshly started tidemark-bloomd.

Usage: python3 crates/bloomd/tests/bf_redis_py.py path/to/tidemark-bloomd
Prints 'N passed, N failed' and exits non-zero on a failure.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import redis

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/debug/tidemark-bloomd"
passed = 0
failed = 0


def check(name, got, want):
    global passed, failed
    if got == want:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: got {got!r}, want {want!r}")


def check_error(name, fn, text):
    global passed, failed
    try:
        fn()
    except redis.ResponseError as e:
        if text in str(e):
            passed += 1
            return
        failed += 1
        print(f"FAIL {name}: error {e!r} lacks {text!r}")
        return
    failed += 1
    print(f"FAIL {name}: no error")


def start(tmp):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(tmp, "server.log"), "ab")
    proc = subprocess.Popen(
        [BIN, "--port", "0", "--port-file", port_file, "--dir", tmp,
         "--save", "", "--appendonly", "yes"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        if os.path.exists(port_file):
            text = open(port_file).read().strip()
            if text:
                port = int(text)
                for _ in range(200):
                    try:
                        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
                        r.ping()
                        return proc, r
                    except redis.ConnectionError:
                        time.sleep(0.05)
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {open(os.path.join(tmp, 'server.log')).read()}")
        time.sleep(0.02)
    proc.kill()
    raise SystemExit("server did not start")


def main():
    tmp = tempfile.mkdtemp(prefix="tidemark-bloomd-py-")
    proc, r = start(tmp)
    try:
        bf = r.bf()
        check("reserve", bf.reserve("py", 0.01, 1000), True)
        check_error("reserve twice", lambda: bf.reserve("py", 0.01, 1000), "item exists")
        check("add", bf.add("py", "a"), 1)
        check("add again", bf.add("py", "a"), 0)
        check("madd", bf.madd("py", "b", "c", "a"), [1, 1, 0])
        check("exists", bf.exists("py", "b"), 1)
        check("exists absent", bf.exists("py", "nope"), 0)
        check("mexists", bf.mexists("py", "a", "nope", "c"), [1, 0, 1])
        check("card", bf.card("py"), 3)
        info = bf.info("py")
        check("info capacity", info.capacity, 1000)
        check("info filters", info.filterNum, 1)
        check("info items", info.insertedNum, 3)
        check("info expansion", info.expansionRate, 2)
        check("info size", info.size > 0, True)
        check("card raw", r.execute_command("BF.CARD", "py"), 3)
        check("insert", bf.insert("ins", ["x", "y"], capacity=10, error=0.001, expansion=4), [1, 1])
        check("insert info", bf.info("ins").expansionRate, 4)
        check_error("insert nocreate", lambda: bf.insert("none", ["x"], noCreate=True), "not found")
        check("insert nonscaling", bf.insert("ns", ["x", "y"], capacity=2, noScale=True), [1, 1])
        check_error("nonscaling full", lambda: bf.add("ns", "z"), "non scaling filter is full")
        check_error("bad error rate", lambda: bf.reserve("e", 2, 10), "error rate range")

        # SCANDUMP / LOADCHUNK, the loop RedisBloom's documentation gives.
        for i in range(2000):
            bf.add("dump", f"item{i}")
        chunks = []
        it = 0
        while True:
            it, data = bf.scandump("dump", it)
            if it == 0:
                break
            chunks.append((it, data))
        for it, data in chunks:
            bf.loadchunk("restored", it, data)
        check("loadchunk info", bf.info("restored").insertedNum, bf.info("dump").insertedNum)
        check("loadchunk exists", bf.mexists("restored", *[f"item{i}" for i in range(0, 2000, 97)]),
              [1] * len(range(0, 2000, 97)))

        check("merge", r.execute_command("BF.MERGE", "m", "py"), b"OK")
        check("merge exists", bf.exists("m", "c"), 1)

        pipe = r.pipeline(transaction=False)
        for i in range(1000):
            pipe.execute_command("BF.ADD", "pipe", i)
        results = pipe.execute()
        check("pipeline", len(results), 1000)
        check("pipeline card", bf.card("pipe"), sum(results))

        check("type", r.type("py"), b"MBbloom--")
        check("dbsize", r.dbsize(), 7)
        check("exists generic", r.exists("py", "nope"), 1)
        check("expire", r.expire("m", 100), True)
        check("ttl", r.ttl("m"), 100)
        check("scan", sorted(r.scan_iter(match="p*")), [b"pipe", b"py"])
        check("info keyspace", r.info("keyspace")["db0"]["keys"], 7)

        # Restart: the append-only log brings everything back.
        card = bf.card("pipe")
        r.shutdown(nosave=True)
        proc.wait(timeout=10)
        proc, r = start(tmp)
        bf = r.bf()
        check("restart card", bf.card("pipe"), card)
        check("restart exists", bf.exists("py", "a"), 1)
        check("restart dbsize", r.dbsize(), 7)
    finally:
        try:
            r.shutdown(nosave=True)
        except Exception:
            pass
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
