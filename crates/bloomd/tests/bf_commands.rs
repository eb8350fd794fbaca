//! The `BF.*` commands against the real binary: replies byte for byte as
//! `shared/reference/redisbloom-behaviour.md` specifies them, and through the `redis` crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Server;

/// Runs each `(command, expected raw reply)` on one connection.
fn check(server: &Server, cases: &[(&[&str], &str)]) {
    let mut c = server.raw();
    for (cmd, want) in cases {
        let got = c.cmd(cmd);
        assert_eq!(got, *want, "command {cmd:?}");
    }
}

const ARITY_RESERVE: &str = "-ERR wrong number of arguments for 'bf.reserve' command\r\n";
const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[test]
fn reserve_checks_arguments_in_redisbloom_order() {
    let s = Server::start("reserve", &[]);
    check(
        &s,
        &[
            (&["BF.RESERVE", "r", "0.01", "100"], "+OK\r\n"),
            (&["BF.RESERVE", "r", "0.01", "100"], "-ERR item exists\r\n"),
            (&["BF.RESERVE", "r", "0.01"], ARITY_RESERVE),
            (
                &[
                    "BF.RESERVE",
                    "r",
                    "0.01",
                    "100",
                    "EXPANSION",
                    "3",
                    "EXPANSION",
                    "5",
                ],
                ARITY_RESERVE,
            ),
            (
                &["bf.reserve", "x", "abc", "100"],
                "-ERR bad error rate\r\n",
            ),
            (
                &["BF.RESERVE", "x", "nan", "100"],
                "-ERR bad error rate\r\n",
            ),
            (&["BF.RESERVE", "x", "", "100"], "-ERR bad error rate\r\n"),
            (
                &["BF.RESERVE", "x", "0.01x", "100"],
                "-ERR bad error rate\r\n",
            ),
            (
                &["BF.RESERVE", "x", "0", "100"],
                "-ERR (0 < error rate range < 1) \r\n",
            ),
            (
                &["BF.RESERVE", "x", "1.0", "100"],
                "-ERR (0 < error rate range < 1) \r\n",
            ),
            (
                &["BF.RESERVE", "x", "inf", "100"],
                "-ERR (0 < error rate range < 1) \r\n",
            ),
            (
                &["BF.RESERVE", "x", "-0.5", "100"],
                "-ERR (0 < error rate range < 1) \r\n",
            ),
            (&["BF.RESERVE", "x1", "1e-300", "1"], "+OK\r\n"),
            (&["BF.RESERVE", "x2", ".5", "100"], "+OK\r\n"),
            (&["BF.RESERVE", "x", "0.01", "abc"], "-ERR bad capacity\r\n"),
            (&["BF.RESERVE", "x", "0.01", "1.5"], "-ERR bad capacity\r\n"),
            (&["BF.RESERVE", "x", "0.01", "1e3"], "-ERR bad capacity\r\n"),
            (
                &["BF.RESERVE", "x", "0.01", "18446744073709551616"],
                "-ERR bad capacity\r\n",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "0"],
                "-ERR (capacity should be larger than 0)\r\n",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "100", "EXPANSION"],
                "-ERR no expansion\r\n",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "100", "NONSCALING", "EXPANSION"],
                "-ERR no expansion\r\n",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "100", "EXPANSION", "x"],
                "-ERR bad expansion\r\n",
            ),
            (
                &[
                    "BF.RESERVE",
                    "x",
                    "0.01",
                    "100",
                    "EXPANSION",
                    "2",
                    "NONSCALING",
                ],
                "-Nonscaling filters cannot expand\r\n",
            ),
            (
                &[
                    "BF.RESERVE",
                    "x",
                    "0.01",
                    "100",
                    "nonscaling",
                    "expansion",
                    "2",
                ],
                "-Nonscaling filters cannot expand\r\n",
            ),
            (&["BF.RESERVE", "x3", "0.01", "100", "foo"], "+OK\r\n"),
            (&["SET", "str", "v"], "+OK\r\n"),
            // Arguments are checked before the key's type.
            (
                &["BF.RESERVE", "str", "2", "100"],
                "-ERR (0 < error rate range < 1) \r\n",
            ),
            (&["BF.RESERVE", "str", "0.01", "100"], WRONGTYPE),
            // Our choice (RedisBloom 8's): EXPANSION 0 makes a non-scaling filter.
            (
                &["BF.RESERVE", "z", "0.01", "2", "EXPANSION", "0"],
                "+OK\r\n",
            ),
            (&["BF.INFO", "z", "EXPANSION"], "*1\r\n$-1\r\n"),
            (
                &["BF.MADD", "z", "a", "b", "c"],
                "*3\r\n:1\r\n:1\r\n-ERR non scaling filter is full\r\n",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "100", "EXPANSION", "-1"],
                "-ERR bad expansion\r\n",
            ),
        ],
    );
}

#[test]
fn add_exists_and_info_replies() {
    let s = Server::start("add", &[]);
    check(
        &s,
        &[
            (&["BF.ADD", "a", "x"], ":1\r\n"),
            (&["BF.ADD", "a", "x"], ":0\r\n"),
            (
                &["BF.INFO", "a"],
                "*10\r\n+Capacity\r\n:100\r\n+Size\r\n:256\r\n+Number of filters\r\n:1\r\n\
                 +Number of items inserted\r\n:1\r\n+Expansion rate\r\n:2\r\n",
            ),
            (&["BF.INFO", "a", "capacity"], "*1\r\n:100\r\n"),
            (&["BF.INFO", "a", "ITEMS"], "*1\r\n:1\r\n"),
            (&["BF.INFO", "a", "FILTERS"], "*1\r\n:1\r\n"),
            (&["BF.INFO", "a", "SIZE"], "*1\r\n:256\r\n"),
            (&["BF.INFO", "a", "EXPANSION"], "*1\r\n:2\r\n"),
            (
                &["BF.INFO", "a", "capacit"],
                "-Invalid information value\r\n",
            ),
            (&["BF.INFO", "missing", "bogus"], "-ERR not found\r\n"),
            (
                &["BF.INFO"],
                "-ERR wrong number of arguments for 'bf.info' command\r\n",
            ),
            (
                &["BF.INFO", "a", "b", "c"],
                "-ERR wrong number of arguments for 'bf.info' command\r\n",
            ),
            (&["BF.MADD", "m", "p", "p", "q"], "*3\r\n:1\r\n:0\r\n:1\r\n"),
            (
                &["BF.MEXISTS", "m", "p", "zz", "q"],
                "*3\r\n:1\r\n:0\r\n:1\r\n",
            ),
            (&["BF.EXISTS", "m", "zz"], ":0\r\n"),
            (&["BF.EXISTS", "nokey", "zz"], ":0\r\n"),
            (&["BF.MEXISTS", "nokey", "a", "b"], "*2\r\n:0\r\n:0\r\n"),
            (&["EXISTS", "nokey"], ":0\r\n"),
            (&["BF.CARD", "m"], ":2\r\n"),
            (&["BF.CARD", "nokey"], ":0\r\n"),
            (
                &["BF.CARD"],
                "-ERR wrong number of arguments for 'bf.card' command\r\n",
            ),
            (
                &["BF.ADD", "a"],
                "-ERR wrong number of arguments for 'bf.add' command\r\n",
            ),
            (
                &["BF.ADD", "a", "b", "c"],
                "-ERR wrong number of arguments for 'bf.add' command\r\n",
            ),
            (
                &["BF.MADD", "a"],
                "-ERR wrong number of arguments for 'bf.madd' command\r\n",
            ),
            (
                &["BF.EXISTS", "a"],
                "-ERR wrong number of arguments for 'bf.exists' command\r\n",
            ),
            (
                &["BF.MEXISTS", "a"],
                "-ERR wrong number of arguments for 'bf.mexists' command\r\n",
            ),
            (&["SET", "s", "v"], "+OK\r\n"),
            (&["BF.ADD", "s", "x"], WRONGTYPE),
            (&["BF.MADD", "s", "x"], WRONGTYPE),
            (&["BF.INFO", "s"], WRONGTYPE),
            (&["BF.CARD", "s"], WRONGTYPE),
            (&["BF.DEBUG", "s"], WRONGTYPE),
            (&["BF.SCANDUMP", "s", "0"], WRONGTYPE),
            (&["BF.INSERT", "s", "ITEMS", "a"], WRONGTYPE),
            (&["BF.INSERT", "s", "NOCREATE", "ITEMS", "a"], WRONGTYPE),
            // RedisBloom quirk kept: EXISTS on another type answers 0.
            (&["BF.EXISTS", "s", "x"], ":0\r\n"),
            (&["BF.MEXISTS", "s", "x", "y"], "*2\r\n:0\r\n:0\r\n"),
            (&["TYPE", "a"], "+MBbloom--\r\n"),
            (
                &["BF.DEBUG", "a"],
                "*2\r\n$6\r\nsize:1\r\n$73\r\nbytes:160 bits:1280 hashes:8 hashwidth:64 capacity:100 size:1 ratio:0.005\r\n",
            ),
            (&["BF.DEBUG", "nokey"], "-ERR not found\r\n"),
            (
                &["BF.DEBUG"],
                "-ERR wrong number of arguments for 'bf.debug' command\r\n",
            ),
        ],
    );
    // Binary, empty and large items.
    let mut c = s.raw();
    let big = vec![b'z'; 100_000];
    for item in [&b""[..], b"\0", b"a\r\nb", &big] {
        assert_eq!(c.cmd_bytes(&[b"BF.ADD", b"bin", item]), ":1\r\n");
        assert_eq!(c.cmd_bytes(&[b"BF.EXISTS", b"bin", item]), ":1\r\n");
    }
}

#[test]
fn insert_parses_options_like_redisbloom() {
    let s = Server::start("insert", &[]);
    let arity = "-ERR wrong number of arguments for 'bf.insert' command\r\n";
    check(
        &s,
        &[
            (&["BF.INSERT", "i", "ITEMS"], arity),
            (&["BF.INSERT", "i", "CAPACITY", "10"], arity),
            (&["BF.INSERT", "i", "CAPACITY", "10", "ITEMS"], arity),
            (
                &["BF.INSERT", "i", "ITEMS", "a", "CAPACITY"],
                "*2\r\n:1\r\n:1\r\n",
            ),
            (&["BF.INSERT", "j", "ERROR", "0.1", "CAPACITY"], arity),
            (
                &["BF.INSERT", "j", "DONTEXIST", "ITEMS", "a"],
                "-Unknown argument received\r\n",
            ),
            (
                &["BF.INSERT", "j", "1", "ITEMS", "a"],
                "-Unknown argument received\r\n",
            ),
            (
                &["BF.INSERT", "j", "CAPACITY", "x", "ITEMS", "a"],
                "-Bad capacity\r\n",
            ),
            (
                &["BF.INSERT", "j", "ERROR", "x", "ITEMS", "a"],
                "-Bad error rate\r\n",
            ),
            (
                &["BF.INSERT", "j", "EXPANSION", "x", "ITEMS", "a"],
                "-Bad expansion\r\n",
            ),
            (
                &["BF.INSERT", "j", "CAPACITY", "0", "ITEMS", "a"],
                "-Bad argument received\r\n",
            ),
            (
                &["BF.INSERT", "j", "ERROR", "1", "ITEMS", "a"],
                "-Bad argument received\r\n",
            ),
            (
                &["BF.INSERT", "j", "EXPANSION", "0", "ITEMS", "a"],
                "-Bad argument received\r\n",
            ),
            // The range check applies even when the filter exists.
            (
                &["BF.INSERT", "i", "ERROR", "2", "ITEMS", "a"],
                "-Bad argument received\r\n",
            ),
            (
                &["BF.INSERT", "j", "NOCREATE", "ITEMS", "a"],
                "-ERR not found\r\n",
            ),
            (&["EXISTS", "j"], ":0\r\n"),
            (
                &[
                    "bf.insert",
                    "k",
                    "capacity",
                    "3",
                    "error",
                    "0.1",
                    "expansion",
                    "4",
                    "items",
                    "a",
                    "ITEMS",
                ],
                "*2\r\n:1\r\n:1\r\n",
            ),
            (&["BF.INFO", "k", "CAPACITY"], "*1\r\n:3\r\n"),
            (&["BF.INFO", "k", "EXPANSION"], "*1\r\n:4\r\n"),
            // Options of an existing filter are ignored.
            (
                &["BF.INSERT", "k", "CAPACITY", "1000", "ITEMS", "b"],
                "*1\r\n:1\r\n",
            ),
            (&["BF.INFO", "k", "CAPACITY"], "*1\r\n:3\r\n"),
            // The last repeated option wins.
            (
                &[
                    "BF.INSERT",
                    "l",
                    "CAPACITY",
                    "5",
                    "CAPACITY",
                    "7",
                    "ITEMS",
                    "a",
                ],
                "*1\r\n:1\r\n",
            ),
            (&["BF.INFO", "l", "CAPACITY"], "*1\r\n:7\r\n"),
            (
                &[
                    "BF.INSERT",
                    "n",
                    "CAPACITY",
                    "3",
                    "NONSCALING",
                    "ITEMS",
                    "a",
                    "b",
                    "c",
                ],
                "*3\r\n:1\r\n:1\r\n:1\r\n",
            ),
            (
                &["BF.INSERT", "n", "ITEMS", "a", "b", "c", "d", "d"],
                "*4\r\n:0\r\n:0\r\n:0\r\n-ERR non scaling filter is full\r\n",
            ),
            (&["BF.ADD", "n", "d"], "-ERR non scaling filter is full\r\n"),
            (&["BF.ADD", "n", "a"], ":0\r\n"),
            (&["BF.INFO", "n", "EXPANSION"], "*1\r\n$-1\r\n"),
            (
                &["BF.INFO", "n"],
                "*10\r\n+Capacity\r\n:3\r\n+Size\r\n:128\r\n+Number of filters\r\n:1\r\n\
                 +Number of items inserted\r\n:3\r\n+Expansion rate\r\n$-1\r\n",
            ),
        ],
    );
}

#[test]
fn filters_grow_by_the_expansion_factor() {
    let s = Server::start("growth", &[]);
    let mut c = s.client();
    let _: () = redis::cmd("BF.RESERVE")
        .arg("g")
        .arg(0.01)
        .arg(10)
        .arg("EXPANSION")
        .arg(2)
        .query(&mut c)
        .unwrap();
    let mut added = 0i64;
    for i in 0..100 {
        added += redis::cmd("BF.ADD")
            .arg("g")
            .arg(i)
            .query::<i64>(&mut c)
            .unwrap();
    }
    let info: Vec<redis::Value> = redis::cmd("BF.INFO").arg("g").query(&mut c).unwrap();
    assert_eq!(info.len(), 10);
    let card: i64 = redis::cmd("BF.CARD").arg("g").query(&mut c).unwrap();
    assert_eq!(card, added);
    let filters: Vec<i64> = redis::cmd("BF.INFO")
        .arg("g")
        .arg("FILTERS")
        .query(&mut c)
        .unwrap();
    assert_eq!(filters, vec![4]); // 10 + 20 + 40 + 80 >= 100
    let cap: Vec<i64> = redis::cmd("BF.INFO")
        .arg("g")
        .arg("CAPACITY")
        .query(&mut c)
        .unwrap();
    assert_eq!(cap, vec![150]);
    let debug: Vec<String> = redis::cmd("BF.DEBUG").arg("g").query(&mut c).unwrap();
    assert_eq!(debug.len(), 5);
    assert_eq!(debug[0], format!("size:{added}"));
    assert!(debug[2].contains("capacity:20") && debug[2].contains("ratio:0.0005"));
    for i in 0..100 {
        assert!(
            redis::cmd("BF.EXISTS")
                .arg("g")
                .arg(i)
                .query::<bool>(&mut c)
                .unwrap()
        );
    }
    // EXPANSION 1 keeps the layer size.
    let _: () = redis::cmd("BF.RESERVE")
        .arg("one")
        .arg(0.01)
        .arg(4)
        .arg("EXPANSION")
        .arg(1)
        .query(&mut c)
        .unwrap();
    for i in 0..20 {
        let _: i64 = redis::cmd("BF.ADD")
            .arg("one")
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let debug: Vec<String> = redis::cmd("BF.DEBUG").arg("one").query(&mut c).unwrap();
    assert!(debug[1..].iter().all(|l| l.contains("capacity:4 ")));
}

#[test]
fn false_positive_rate_stays_under_the_requested_one() {
    let s = Server::start("fpr", &[]);
    let mut c = s.client();
    for rate in [0.1, 0.01, 0.001] {
        let key = format!("fp{rate}");
        let _: () = redis::cmd("BF.RESERVE")
            .arg(&key)
            .arg(rate)
            .arg(1024)
            .query(&mut c)
            .unwrap();
        let mut add = redis::cmd("BF.MADD");
        add.arg(&key);
        for i in 0..1024 {
            add.arg(i);
        }
        let _: Vec<i64> = add.query(&mut c).unwrap();
        let mut probe = redis::cmd("BF.MEXISTS");
        probe.arg(&key);
        for i in 1024..11_264 {
            probe.arg(i);
        }
        let hits: Vec<i64> = probe.query(&mut c).unwrap();
        let fp = hits.iter().sum::<i64>() as f64 / 10_240.0;
        assert!(fp <= rate, "rate {rate}: measured {fp}");
    }
}

#[test]
fn scandump_and_loadchunk_round_trip() {
    let s = Server::start("dump", &[]);
    let mut c = s.client();
    // ~24 MB: two chunks of at most 16 MiB.
    let _: () = redis::cmd("BF.RESERVE")
        .arg("big")
        .arg(0.01)
        .arg(20_000_000)
        .query(&mut c)
        .unwrap();
    let mut add = redis::cmd("BF.MADD");
    add.arg("big");
    for i in 0..5000 {
        add.arg(format!("item{i}"));
    }
    let _: Vec<i64> = add.query(&mut c).unwrap();
    let mut chunks: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut iter = 0i64;
    loop {
        let (next, data): (i64, Vec<u8>) = redis::cmd("BF.SCANDUMP")
            .arg("big")
            .arg(iter)
            .query(&mut c)
            .unwrap();
        if next == 0 {
            assert!(data.is_empty());
            break;
        }
        assert!(data.len() <= 16 * 1024 * 1024);
        chunks.push((next, data));
        iter = next;
    }
    assert!(chunks.len() >= 3, "header and at least two data chunks");
    for (it, data) in &chunks {
        let _: () = redis::cmd("BF.LOADCHUNK")
            .arg("copy")
            .arg(*it)
            .arg(data.as_slice())
            .query(&mut c)
            .unwrap();
    }
    let a: Vec<redis::Value> = redis::cmd("BF.INFO").arg("big").query(&mut c).unwrap();
    let b: Vec<redis::Value> = redis::cmd("BF.INFO").arg("copy").query(&mut c).unwrap();
    assert_eq!(a, b);
    let mut probe = redis::cmd("BF.MEXISTS");
    probe.arg("copy");
    for i in 0..5000 {
        probe.arg(format!("item{i}"));
    }
    let hits: Vec<i64> = probe.query(&mut c).unwrap();
    assert!(hits.iter().all(|&h| h == 1));

    let mut r = s.raw();
    let cases: &[(&[&str], &str)] = &[
        (&["BF.SCANDUMP", "nokey", "x"], "-ERR not found\r\n"),
        (
            &["BF.SCANDUMP", "big", "x"],
            "-Second argument must be numeric\r\n",
        ),
        (&["BF.SCANDUMP", "big", "-1"], "*2\r\n:0\r\n$0\r\n\r\n"),
        (
            &["BF.SCANDUMP", "big", "999999999999"],
            "*2\r\n:0\r\n$0\r\n\r\n",
        ),
        (
            &["BF.SCANDUMP", "big"],
            "-ERR wrong number of arguments for 'bf.scandump' command\r\n",
        ),
        (
            &["BF.LOADCHUNK", "n", "x", "d"],
            "-ERR Second argument must be numeric\r\n",
        ),
        (
            &["BF.LOADCHUNK", "n", "1", "garbage"],
            "-ERR received bad data\r\n",
        ),
        (&["BF.LOADCHUNK", "n", "5", "garbage"], "-ERR not found\r\n"),
        (
            &["BF.LOADCHUNK", "big", "1", "x"],
            "-ERR received bad data\r\n",
        ),
        (
            &["BF.LOADCHUNK", "n", "1"],
            "-ERR wrong number of arguments for 'bf.loadchunk' command\r\n",
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(r.cmd(cmd), *want, "{cmd:?}");
    }
    // A small filter: header, then chunks out of order or too long are refused.
    let _: i64 = redis::cmd("BF.ADD")
        .arg("small")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let (one, header): (i64, Vec<u8>) = redis::cmd("BF.SCANDUMP")
        .arg("small")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(one, 1);
    let (next, body): (i64, Vec<u8>) = redis::cmd("BF.SCANDUMP")
        .arg("small")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(next, 1 + body.len() as i64);
    assert_eq!(
        r.cmd_bytes(&[b"BF.LOADCHUNK", b"s2", b"1", &header]),
        "+OK\r\n"
    );
    assert_eq!(
        r.cmd_bytes(&[
            b"BF.LOADCHUNK",
            b"s2",
            (next + 5).to_string().as_bytes(),
            &body
        ]),
        "-ERR invalid offset - no link found\r\n"
    );
    let mut longer = body.clone();
    longer.push(0);
    assert_eq!(
        r.cmd_bytes(&[
            b"BF.LOADCHUNK",
            b"s2",
            (next + 1).to_string().as_bytes(),
            &longer
        ]),
        "-ERR invalid chunk - Too big for current filter\r\n"
    );
    // A corrupted body is refused whole and the key goes away.
    let mut bad = body.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    assert_eq!(
        r.cmd_bytes(&[b"BF.LOADCHUNK", b"s2", next.to_string().as_bytes(), &bad]),
        "-ERR received bad data\r\n"
    );
    assert_eq!(r.cmd(&["EXISTS", "s2"]), ":0\r\n");
    assert_eq!(
        r.cmd_bytes(&[b"BF.LOADCHUNK", b"s3", b"1", &header]),
        "+OK\r\n"
    );
    assert_eq!(
        r.cmd_bytes(&[b"BF.LOADCHUNK", b"s3", next.to_string().as_bytes(), &body]),
        "+OK\r\n"
    );
    assert_eq!(r.cmd(&["BF.EXISTS", "s3", "x"]), ":1\r\n");
}

#[test]
fn merge_is_the_union_of_filters() {
    let s = Server::start("merge", &[]);
    let mut c = s.raw();
    let cases: &[(&[&str], &str)] = &[
        (&["BF.RESERVE", "a", "0.01", "1000"], "+OK\r\n"),
        (&["BF.RESERVE", "b", "0.01", "1000"], "+OK\r\n"),
        (&["BF.MADD", "a", "1", "2"], "*2\r\n:1\r\n:1\r\n"),
        (&["BF.MADD", "b", "3", "4"], "*2\r\n:1\r\n:1\r\n"),
        (&["BF.MERGE", "u", "a", "b"], "+OK\r\n"),
        (
            &["BF.MEXISTS", "u", "1", "2", "3", "4", "5"],
            "*5\r\n:1\r\n:1\r\n:1\r\n:1\r\n:0\r\n",
        ),
        (&["BF.MERGE", "a", "b"], "+OK\r\n"),
        (&["BF.MEXISTS", "a", "3", "4"], "*2\r\n:1\r\n:1\r\n"),
        (&["BF.MERGE", "u", "nokey"], "-ERR not found\r\n"),
        (
            &["BF.MERGE", "u"],
            "-ERR wrong number of arguments for 'bf.merge' command\r\n",
        ),
        (&["BF.RESERVE", "c", "0.01", "50"], "+OK\r\n"),
        (
            &["BF.MERGE", "u", "c"],
            "-ERR cannot combine filters of different shape: capacity 1000 vs 50\r\n",
        ),
        (&["SET", "s", "v"], "+OK\r\n"),
        (&["BF.MERGE", "s", "a"], WRONGTYPE),
        (&["BF.MERGE", "u", "s"], WRONGTYPE),
    ];
    for (cmd, want) in cases {
        assert_eq!(c.cmd(cmd), *want, "{cmd:?}");
    }
}

#[test]
fn pipelines_and_concurrent_clients() {
    let s = Server::start("pipeline", &[]);
    let mut c = s.client();
    // One pipeline of 20,000 commands through the redis crate.
    let mut p = redis::pipe();
    for i in 0..10_000 {
        p.cmd("BF.ADD").arg("p").arg(i);
        p.cmd("BF.EXISTS").arg("p").arg(i);
    }
    let replies: Vec<i64> = p.query(&mut c).unwrap();
    assert_eq!(replies.len(), 20_000);
    assert!(replies.chunks(2).all(|r| r[1] == 1));
    let added: i64 = replies.chunks(2).map(|r| r[0]).sum();
    let card: i64 = redis::cmd("BF.CARD").arg("p").query(&mut c).unwrap();
    assert_eq!(card, added);

    // Raw: 1,000 commands in one write, split at odd places, replies in order.
    let mut raw = s.raw();
    let mut bytes = Vec::new();
    for i in 0..1000 {
        bytes.extend(common::encode(&[b"ECHO", format!("m{i}").as_bytes()]));
    }
    for piece in bytes.chunks(777) {
        raw.send(piece);
    }
    for i in 0..1000 {
        let want = format!("m{i}");
        assert_eq!(raw.reply(), format!("${}\r\n{want}\r\n", want.len()));
    }

    // Eight clients at once, on their own keys and on a shared one.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let url = s.url();
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut ones = 0i64;
                for i in 0..500 {
                    let _: i64 = redis::cmd("BF.ADD")
                        .arg(format!("own{t}"))
                        .arg(i)
                        .query(&mut c)
                        .unwrap();
                    ones += redis::cmd("BF.ADD")
                        .arg("shared")
                        .arg(format!("{t}-{i}"))
                        .query::<i64>(&mut c)
                        .unwrap();
                }
                ones
            })
        })
        .collect();
    let ones: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let card: i64 = redis::cmd("BF.CARD").arg("shared").query(&mut c).unwrap();
    assert_eq!(card, ones);
    assert!(ones > 3900, "{ones}");
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 10);
}
