//! Every command through `redis-cli` (Debian's `redis-tools`, installed by `.ci/run`), in its
//! formatted (`--no-raw`) output, plus `--pipe` for a pipelined bulk load.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::Server;

fn cli(s: &Server, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &s.port.to_string(), "--no-raw"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("redis-cli not runnable ({e}): apt-get install redis-tools"));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

#[test]
fn every_command_through_redis_cli() {
    let s = Server::start("cli", &["--save", ""]);
    let cases: &[(&[&str], &str)] = &[
        (&["PING"], "PONG"),
        (&["ECHO", "hi"], "\"hi\""),
        (&["BF.RESERVE", "f", "0.01", "100"], "OK"),
        (
            &["BF.RESERVE", "f", "0.01", "100"],
            "(error) ERR item exists",
        ),
        (&["BF.ADD", "f", "a"], "(integer) 1"),
        (
            &["BF.MADD", "f", "a", "b"],
            "1) (integer) 0\n2) (integer) 1",
        ),
        (&["BF.EXISTS", "f", "a"], "(integer) 1"),
        (
            &["BF.MEXISTS", "f", "a", "zz"],
            "1) (integer) 1\n2) (integer) 0",
        ),
        (
            &["BF.INSERT", "g", "CAPACITY", "10", "ITEMS", "x"],
            "1) (integer) 1",
        ),
        (&["BF.INFO", "f", "ITEMS"], "1) (integer) 2"),
        (
            &["BF.INFO", "f"],
            " 1) Capacity\n 2) (integer) 100\n 3) Size\n 4) (integer) 256\n 5) Number of filters\n 6) (integer) 1\n 7) Number of items inserted\n 8) (integer) 2\n 9) Expansion rate\n10) (integer) 2",
        ),
        (&["BF.CARD", "f"], "(integer) 2"),
        (
            &["BF.DEBUG", "f"],
            "1) \"size:2\"\n2) \"bytes:160 bits:1280 hashes:8 hashwidth:64 capacity:100 size:2 ratio:0.005\"",
        ),
        (&["BF.MERGE", "h", "f"], "OK"),
        (&["BF.EXISTS", "h", "b"], "(integer) 1"),
        (
            &["BF.SCANDUMP", "f", "x"],
            "(error) Second argument must be numeric",
        ),
        (
            &["BF.ADD", "f"],
            "(error) ERR wrong number of arguments for 'bf.add' command",
        ),
        (&["SELECT", "0"], "OK"),
        (&["CLIENT", "SETNAME", "cli"], "OK"),
        (&["DBSIZE"], "(integer) 3"),
        (&["EXISTS", "f", "g", "nope"], "(integer) 2"),
        (&["TYPE", "f"], "MBbloom--"),
        (&["KEYS", "f*"], "1) \"f\""),
        (&["RENAME", "h", "h2"], "OK"),
        (&["EXPIRE", "h2", "100"], "(integer) 1"),
        (&["PERSIST", "h2"], "(integer) 1"),
        (&["DEL", "h2"], "(integer) 1"),
        (&["UNLINK", "nope"], "(integer) 0"),
        (&["SAVE"], "OK"),
        (&["BGSAVE"], "Background saving started"),
        (
            &["NOSUCH", "x"],
            "(error) ERR unknown command 'NOSUCH', with args beginning with: 'x'",
        ),
        (&["FLUSHDB"], "OK"),
        (&["FLUSHALL"], "OK"),
        (&["DBSIZE"], "(integer) 0"),
    ];
    for (args, want) in cases {
        assert_eq!(cli(&s, args), *want, "redis-cli {args:?}");
    }
    assert!(cli(&s, &["CLIENT", "ID"]).starts_with("(integer) "));
    assert!(cli(&s, &["BF.ADD", "t", "x"]) == "(integer) 1");
    assert_eq!(cli(&s, &["EXPIRE", "t", "100"]), "(integer) 1");
    let ttl = cli(&s, &["TTL", "t"]);
    assert!(ttl == "(integer) 100" || ttl == "(integer) 99", "{ttl}");
    assert!(cli(&s, &["INFO", "keyspace"]).starts_with("# Keyspace"));
    assert!(cli(&s, &["LASTSAVE"]).starts_with("(integer) "));
    assert!(cli(&s, &["SCAN", "0"]).starts_with("1) \"0\""));
    assert!(cli(&s, &["HELLO", "3"]).contains("tidemark-bloomd"));
    assert!(cli(&s, &["COMMAND", "COUNT"]).starts_with("(integer) "));
    assert_eq!(cli(&s, &["QUIT"]), "OK");

    // SCANDUMP -> LOADCHUNK through redis-cli's binary-safe output is exercised with the
    // redis crate; here the end-of-dump reply's formatting:
    cli(&s, &["BF.ADD", "d", "x"]);
    assert_eq!(
        cli(&s, &["BF.SCANDUMP", "d", "-1"]),
        "1) (integer) 0\n2) \"\""
    );

    // BF.SCANDUMP chunks taken with the redis crate, loaded back with `redis-cli -x`, which
    // reads the last argument (the binary chunk) from stdin.
    let mut conn = s.client();
    let mut iter = 0i64;
    loop {
        let (next, data): (i64, Vec<u8>) = redis::cmd("BF.SCANDUMP")
            .arg("d")
            .arg(iter)
            .query(&mut conn)
            .unwrap();
        if next == 0 {
            break;
        }
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &s.port.to_string(), "-x"])
            .args(["BF.LOADCHUNK", "d2", &next.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&data).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "OK");
        iter = next;
    }
    assert_eq!(cli(&s, &["BF.EXISTS", "d2", "x"]), "(integer) 1");
    assert!(cli(&s, &["COMMAND", "DOCS", "bf.add"]).contains("bf.add"));

    // redis-cli --pipe: 100,000 pipelined commands in one stream.
    let mut input = Vec::new();
    for i in 0..100_000 {
        input.extend(common::encode(&[
            b"BF.ADD",
            b"piped",
            i.to_string().as_bytes(),
        ]));
    }
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &s.port.to_string(), "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0, replies: 100000"), "{text}");
    let card: u64 = cli(&s, &["BF.CARD", "piped"])
        .trim_start_matches("(integer) ")
        .parse()
        .unwrap();
    assert!(card > 99_000, "{card}");

    // SHUTDOWN through redis-cli stops the server.
    cli(&s, &["SHUTDOWN", "NOSAVE"]);
    assert!(s.wait_exit().success());
}
