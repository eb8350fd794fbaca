#!/usr/bin/env python3
"""Load test: tidemark-bloomd's BF.ADD/BF.EXISTS beside redis-server's SADD/SISMEMBER.

Starts both servers on free loopback ports (nothing else is contacted), then
 1. memory for 10,000,000 distinct items: a Redis set (SADD, 1,000 members per command)
    against a filter reserved for 10M at 1% (BF.MADD), both loaded with redis-cli --pipe;
 2. pipelined throughput with redis-benchmark -P 32 -c 50, alternating the two servers
    for several rounds (the median is reported): SADD vs BF.ADD, SISMEMBER vs BF.EXISTS,
    on the reserved filter and on a filter grown from the default capacity 100, and PING.
Prints a Markdown report. Usage:

    cargo build --release -p tidemark-bloomd
    python3 crates/bloomd/scripts/load_test.py target/release/tidemark-bloomd [--items N]
        [--requests N] [--rounds N]
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc):
    for _ in range(500):
        if proc.poll() is not None:
            raise SystemExit(f"server on {port} exited")
        try:
            r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)
            r.ping()
            return r
        except redis.ConnectionError:
            time.sleep(0.02)
    raise SystemExit(f"server on {port} did not start")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pipe_load(port, command, key, items, batch=1000):
    """Streams `command key m1 ... m1000` requests into redis-cli --pipe."""
    proc = subprocess.Popen(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--pipe"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    head_cmd = f"${len(command)}\r\n{command}\r\n${len(key)}\r\n{key}\r\n"
    for start in range(0, items, batch):
        n = min(batch, items - start)
        parts = [f"*{n + 2}\r\n", head_cmd]
        parts.extend(f"$12\r\n{i:012d}\r\n" for i in range(start, start + n))
        proc.stdin.write("".join(parts).encode())
    proc.stdin.close()
    out = proc.stdout.read().decode()
    proc.wait()
    m = re.search(r"errors: (\d+), replies: (\d+)", out)
    if not m or m.group(1) != "0":
        raise SystemExit(f"--pipe load failed: {out}")


def bench(port, args, requests):
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-P", "32", "-c", "50",
           "-n", str(requests), "-r", "10000000", "-q"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout
    m = re.findall(r"([\d.]+) requests per second", out.replace("\r", "\n"))
    if not m:
        raise SystemExit(f"no result from {' '.join(cmd)}: {out}")
    return float(m[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--items", type=int, default=10_000_000)
    ap.add_argument("--requests", type=int, default=5_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:ARGS, another tidemark-bloomd started with ARGS (e.g. "
                         "'legacy:--bloom-hash legacy') whose BF.ADD/BF.EXISTS run in the same "
                         "alternating rounds")
    a = ap.parse_args()
    variants = [v.split(":", 1) for v in a.variant]

    tmp = tempfile.mkdtemp(prefix="bloomd-load-")
    rport, bport = free_port(), free_port()
    redis_proc = subprocess.Popen(
        ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    bloomd_proc = subprocess.Popen(
        [a.binary, "--port", str(bport), "--dir", tmp, "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    extra = []
    for name, args in variants:
        port = free_port()
        vdir = tempfile.mkdtemp(prefix=f"bloomd-{name}-", dir=tmp)
        proc = subprocess.Popen(
            [a.binary, "--port", str(port), "--dir", vdir, "--save", ""] + args.split(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        extra.append((name, port, proc))
    try:
        rr = wait_ready(rport, redis_proc)
        br = wait_ready(bport, bloomd_proc)
        for name, port, proc in extra:
            wait_ready(port, proc).execute_command("BF.RESERVE", "bf", "0.01", "10000000")
        version = rr.info("server")["redis_version"]

        # 1. Memory for N distinct items.
        rr.flushall()
        base_used = rr.info("memory")["used_memory"]
        base_rss = rss_kib(redis_proc.pid)
        t = time.time()
        pipe_load(rport, "SADD", "myset", a.items)
        set_load_s = time.time() - t
        set_card = rr.scard("myset")
        set_used = rr.info("memory")["used_memory"] - base_used
        set_usage = rr.memory_usage("myset", samples=0)
        set_rss = (rss_kib(redis_proc.pid) - base_rss) * 1024
        rr.flushall()

        base_rss_b = rss_kib(bloomd_proc.pid)
        br.execute_command("BF.RESERVE", "bf", "0.01", str(a.items))
        t = time.time()
        pipe_load(bport, "BF.MADD", "bf", a.items)
        bf_load_s = time.time() - t
        info = br.execute_command("BF.INFO", "bf")
        bf_info = dict(zip([x.decode() if isinstance(x, bytes) else x for x in info[0::2]], info[1::2]))
        bf_used = br.info("memory")["used_memory"]
        bf_rss = (rss_kib(bloomd_proc.pid) - base_rss_b) * 1024
        # False-positive rate over 100,000 items never added.
        absent = [f"x{i:011d}" for i in range(100_000)]
        hits = 0
        for s in range(0, len(absent), 10_000):
            hits += sum(br.execute_command("BF.MEXISTS", "bf", *absent[s:s + 10_000]))
        fpr = hits / len(absent)
        br.delete("bf")

        # 2. Throughput, alternating servers.
        br.execute_command("BF.RESERVE", "bf", "0.01", "10000000")
        runs = {k: [] for k in ["SADD", "BF.ADD", "SISMEMBER", "BF.EXISTS",
                                "BF.ADD grown", "BF.EXISTS grown", "PING redis", "PING bloomd"]}
        for name, _, _ in extra:
            for k in ["BF.ADD", "BF.EXISTS", "BF.ADD grown", "BF.EXISTS grown"]:
                runs[f"{k} [{name}]"] = []
        for _ in range(a.rounds):
            runs["SADD"].append(bench(rport, ["SADD", "myset", "__rand_int__"], a.requests))
            runs["BF.ADD"].append(bench(bport, ["BF.ADD", "bf", "__rand_int__"], a.requests))
            runs["SISMEMBER"].append(bench(rport, ["SISMEMBER", "myset", "__rand_int__"], a.requests))
            runs["BF.EXISTS"].append(bench(bport, ["BF.EXISTS", "bf", "__rand_int__"], a.requests))
            runs["BF.ADD grown"].append(bench(bport, ["BF.ADD", "grown", "__rand_int__"], a.requests))
            runs["BF.EXISTS grown"].append(bench(bport, ["BF.EXISTS", "grown", "__rand_int__"], a.requests))
            runs["PING redis"].append(bench(rport, ["PING"], a.requests))
            runs["PING bloomd"].append(bench(bport, ["PING"], a.requests))
            for name, port, _ in extra:
                for k, cmd in [("BF.ADD", ["BF.ADD", "bf"]), ("BF.EXISTS", ["BF.EXISTS", "bf"]),
                               ("BF.ADD grown", ["BF.ADD", "grown"]),
                               ("BF.EXISTS grown", ["BF.EXISTS", "grown"])]:
                    runs[f"{k} [{name}]"].append(bench(port, cmd + ["__rand_int__"], a.requests))
        med = {k: statistics.median(v) for k, v in runs.items()}
        grown = br.execute_command("BF.INFO", "grown")

        print(f"## Load test ({time.strftime('%Y-%m-%d')})\n")
        print(f"redis-server {version}; `redis-benchmark -P 32 -c 50 -n {a.requests} -r 10000000`, "
              f"median of {a.rounds} alternating rounds; {os.cpu_count()} cores.\n")
        print("| command | redis-server | tidemark-bloomd | ratio |")
        print("|---|---|---|---|")
        for ours, theirs, label in [("BF.ADD", "SADD", "SADD vs BF.ADD (reserved 10M@1%)"),
                                    ("BF.EXISTS", "SISMEMBER", "SISMEMBER vs BF.EXISTS (reserved)"),
                                    ("BF.ADD grown", "SADD", "SADD vs BF.ADD (grown from 100)"),
                                    ("BF.EXISTS grown", "SISMEMBER", "SISMEMBER vs BF.EXISTS (grown)"),
                                    ("PING bloomd", "PING redis", "PING")]:
            print(f"| {label} | {med[theirs]:,.0f} req/s | {med[ours]:,.0f} req/s | "
                  f"{med[ours] / med[theirs]:.2f}× |")
        for name, _, _ in extra:
            for k, theirs in [("BF.ADD", "SADD"), ("BF.EXISTS", "SISMEMBER"),
                              ("BF.ADD grown", "SADD"), ("BF.EXISTS grown", "SISMEMBER")]:
                ours = f"{k} [{name}]"
                print(f"| {theirs} vs {ours} | {med[theirs]:,.0f} req/s | {med[ours]:,.0f} req/s | "
                      f"{med[ours] / med[theirs]:.2f}× |")
        print()
        print("All rounds (req/s): " + "; ".join(
            f"{k}: {', '.join(f'{x:,.0f}' for x in v)}" for k, v in runs.items()))
        print()
        print(f"Grown filter after the runs: {grown}\n")
        print(f"### Memory for {a.items:,} distinct items\n")
        print("| | Redis set | tidemark-bloomd filter (BF.RESERVE 0.01 N) | set / filter |")
        print("|---|---|---|---|")
        print(f"| items counted | SCARD {set_card:,} | BF.CARD {bf_info.get('Number of items inserted'):,} | |")
        print(f"| value size | MEMORY USAGE {set_usage:,} B | BF.INFO Size {bf_info.get('Size'):,} B | "
              f"{set_usage / bf_info.get('Size'):.1f}× |")
        print(f"| used_memory | +{set_used:,} B | {bf_used:,} B | {set_used / bf_used:.1f}× |")
        print(f"| process RSS growth | +{set_rss:,} B | +{bf_rss:,} B | {set_rss / max(bf_rss, 1):.1f}× |")
        print(f"| load time (redis-cli --pipe, 1,000 per command) | {set_load_s:.1f} s | {bf_load_s:.1f} s | |")
        print(f"\nMeasured false-positive rate of the filter over 100,000 absent items: {fpr:.4%}")
    finally:
        for p in [redis_proc, bloomd_proc] + [proc for _, _, proc in extra]:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
