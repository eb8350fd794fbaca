//! Generic commands, limits, malformed input and persistence, against the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{Server, start_fails, temp_dir};

#[test]
fn generic_commands() {
    let s = Server::start("generic", &[]);
    let mut c = s.raw();
    let cases: &[(&[&str], &str)] = &[
        (&["PING"], "+PONG\r\n"),
        (&["ping", "hi"], "$2\r\nhi\r\n"),
        (
            &["PING", "a", "b"],
            "-ERR wrong number of arguments for 'ping' command\r\n",
        ),
        (&["ECHO", "x"], "$1\r\nx\r\n"),
        (&["SELECT", "0"], "+OK\r\n"),
        (&["SELECT", "1"], "-ERR DB index is out of range\r\n"),
        (
            &["SELECT", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["CLIENT", "SETNAME", "me"], "+OK\r\n"),
        (&["CLIENT", "GETNAME"], "$2\r\nme\r\n"),
        (
            &["CLIENT", "SETNAME", "a b"],
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
        ),
        (&["CLIENT", "SETINFO", "LIB-NAME", "x"], "+OK\r\n"),
        (
            &["CLIENT", "NOPE"],
            "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n",
        ),
        (&["DBSIZE"], ":0\r\n"),
        (&["BF.ADD", "k1", "x"], ":1\r\n"),
        (&["BF.ADD", "k2", "x"], ":1\r\n"),
        (&["SET", "str", "v"], "+OK\r\n"),
        (&["GET", "str"], "$1\r\nv\r\n"),
        (
            &["GET", "k1"],
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ),
        (&["DBSIZE"], ":3\r\n"),
        (&["EXISTS", "k1", "k2", "k1", "no"], ":3\r\n"),
        (&["TYPE", "k1"], "+MBbloom--\r\n"),
        (&["TYPE", "str"], "+string\r\n"),
        (&["TYPE", "no"], "+none\r\n"),
        (&["KEYS", "k*"], "*2\r\n$2\r\nk1\r\n$2\r\nk2\r\n"),
        (&["RENAME", "k2", "k3"], "+OK\r\n"),
        (&["RENAME", "no", "k4"], "-ERR no such key\r\n"),
        (&["BF.EXISTS", "k3", "x"], ":1\r\n"),
        (&["EXISTS", "k2"], ":0\r\n"),
        (&["TTL", "k1"], ":-1\r\n"),
        (&["TTL", "no"], ":-2\r\n"),
        (&["EXPIRE", "k1", "100"], ":1\r\n"),
        // Either, if a second boundary passes in between.
        (&["TTL", "k1"], ":100\r\n|:99\r\n"),
        (&["EXPIRE", "k1", "200", "NX"], ":0\r\n"),
        (
            &["EXPIRE", "k1", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["EXPIRE", "no", "10"], ":0\r\n"),
        (&["PERSIST", "k1"], ":1\r\n"),
        (&["PERSIST", "k1"], ":0\r\n"),
        (&["TTL", "k1"], ":-1\r\n"),
        (&["PEXPIRE", "k3", "150"], ":1\r\n"),
        (&["DEL", "str", "no"], ":1\r\n"),
        (&["UNLINK", "k1"], ":1\r\n"),
        (
            &["FOO", "a", "b"],
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n",
        ),
        (&["FLUSHDB"], "+OK\r\n"),
        (&["DBSIZE"], ":0\r\n"),
        (&["BF.ADD", "z", "x"], ":1\r\n"),
        (&["FLUSHALL"], "+OK\r\n"),
        (&["DBSIZE"], ":0\r\n"),
        (&["COMMAND", "COUNT"], ":48\r\n"),
        (&["BF.RESERVE", "mu", "0.01", "100"], "+OK\r\n"),
        // 256 (BF.INFO Size) + 2 (key) + 96 (per-key overhead).
        (&["MEMORY", "USAGE", "mu"], ":354\r\n"),
        (&["MEMORY", "USAGE", "none"], "$-1\r\n"),
        (
            &["BGREWRITEAOF"],
            "-ERR append only file is disabled (start with --appendonly yes)\r\n",
        ),
        (&["DEL", "mu"], ":1\r\n"),
        (
            &["AUTH", "x"],
            "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n",
        ),
    ];
    for (cmd, want) in cases {
        let got = c.cmd(cmd);
        assert!(
            want.split('|').any(|w| w == got),
            "{cmd:?}: {got:?} vs {want:?}"
        );
    }
    // The key with a 150 ms expiry went away with FLUSHALL; check expiry on a new one.
    assert_eq!(c.cmd(&["BF.ADD", "e", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["PEXPIRE", "e", "100"]), ":1\r\n");
    let pttl = c.cmd(&["PTTL", "e"]);
    assert!(pttl.starts_with(':') && pttl != ":-1\r\n", "{pttl}");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(c.cmd(&["EXISTS", "e"]), ":0\r\n");
    assert_eq!(c.cmd(&["EXPIRE", "gone", "-1"]), ":0\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "p", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["EXPIRE", "p", "-1"]), ":1\r\n");
    assert_eq!(c.cmd(&["EXISTS", "p"]), ":0\r\n");

    // CLIENT ID, COMMAND INFO/DOCS, INFO sections, LASTSAVE, TIME.
    assert!(c.cmd(&["CLIENT", "ID"]).starts_with(':'));
    let info = c.cmd(&["COMMAND", "INFO", "bf.add", "nope"]);
    assert!(
        info.starts_with(
            "*2\r\n*10\r\n$6\r\nbf.add\r\n:3\r\n*2\r\n+write\r\n+denyoom\r\n:1\r\n:1\r\n:1\r\n"
        ),
        "{info}"
    );
    assert!(info.ends_with("*-1\r\n"));
    assert!(c.cmd(&["COMMAND", "DOCS"]).starts_with("*96\r\n"));
    assert!(c.cmd(&["COMMAND"]).starts_with("*48\r\n"));
    for section in [
        "server",
        "memory",
        "keyspace",
        "persistence",
        "clients",
        "stats",
    ] {
        let text = c.cmd(&["INFO", section]);
        assert!(
            text.to_lowercase().contains(&format!("# {section}")),
            "{text}"
        );
    }
    let all = c.cmd(&["INFO"]);
    for field in [
        "used_memory:",
        "rdb_last_save_time:",
        "aof_enabled:0",
        "tcp_port:",
    ] {
        assert!(all.contains(field), "{field} missing from {all}");
    }
    assert!(c.cmd(&["LASTSAVE"]).starts_with(':'));
    assert!(c.cmd(&["TIME"]).starts_with("*2\r\n"));
    let cfg = c.cmd(&["CONFIG", "GET", "save"]);
    assert!(cfg.starts_with("*2\r\n$4\r\nsave\r\n"), "{cfg}");

    // SCAN walks every key exactly once, with MATCH and TYPE filters.
    for i in 0..300 {
        assert_eq!(c.cmd(&["BF.ADD", &format!("s{i}"), "x"]), ":1\r\n");
    }
    let mut conn = s.client();
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(37)
            .query(&mut conn)
            .unwrap();
        for k in keys {
            assert!(seen.insert(k));
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 300);
    let (_, some): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg("s1?")
        .arg("COUNT")
        .arg(1000)
        .arg("TYPE")
        .arg("MBbloom--")
        .query(&mut conn)
        .unwrap();
    assert_eq!(some.len(), 10);

    // HELLO 3 switches to RESP3: maps and the `_` null.
    let hello = c.cmd(&["HELLO", "3"]);
    assert!(hello.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello}");
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), "$2\r\nme\r\n");
    assert_eq!(c.cmd(&["GET", "nothing"]), "_\r\n");
    assert_eq!(
        c.cmd(&["HELLO", "4"]),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert!(c.cmd(&["HELLO", "2"]).starts_with("*14\r\n"));
    assert_eq!(c.cmd(&["QUIT"]), "+OK\r\n");
    assert!(c.closed());
}

#[test]
fn auth_is_required_when_a_password_is_set() {
    let s = Server::start("auth", &["--requirepass", "sekret"]);
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["BF.ADD", "a", "x"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.cmd(&["PING"]), "-NOAUTH Authentication required.\r\n");
    assert_eq!(
        c.cmd(&["AUTH", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(c.cmd(&["AUTH", "sekret"]), "+OK\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "a", "x"]), ":1\r\n");
    let mut d = s.raw();
    assert!(
        d.cmd(&["HELLO", "2", "AUTH", "default", "sekret"])
            .starts_with("*14\r\n")
    );
    assert_eq!(d.cmd(&["BF.EXISTS", "a", "x"]), ":1\r\n");
    let client = redis::Client::open(format!("redis://:sekret@127.0.0.1:{}/", s.port)).unwrap();
    let mut conn = client.get_connection().unwrap();
    let n: i64 = redis::cmd("BF.CARD").arg("a").query(&mut conn).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn maxmemory_answers_oom_instead_of_growing() {
    let s = Server::start("oom", &["--maxmemory", "1800kb"]);
    let mut c = s.raw();
    let oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
    assert_eq!(c.cmd(&["BF.RESERVE", "huge", "0.01", "10000000"]), oom);
    assert_eq!(c.cmd(&["BF.RESERVE", "ok", "0.01", "1000000"]), "+OK\r\n");
    assert_eq!(c.cmd(&["BF.RESERVE", "ok2", "0.01", "1000000"]), oom);
    // A scaling filter whose next layer would pass the limit refuses new items.
    let mut refused = false;
    for i in 0..200_000 {
        let r = c.cmd(&["BF.ADD", "grow", &i.to_string()]);
        if r == oom {
            refused = true;
            break;
        }
    }
    assert!(refused);
    assert_eq!(c.cmd(&["BF.EXISTS", "grow", "0"]), ":1\r\n");
    assert_eq!(c.cmd(&["DEL", "ok"]), ":1\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "other", "x"]), ":1\r\n");
    assert!(c.cmd(&["INFO", "memory"]).contains("maxmemory:1843200"));
}

#[test]
fn malformed_input_closes_only_that_connection() {
    let s = Server::start("malformed", &["--max-request-bytes", "1kb"]);
    let mut good = s.raw();
    assert_eq!(good.cmd(&["BF.ADD", "k", "x"]), ":1\r\n");
    let bad_inputs: &[&[u8]] = &[
        b"*x\r\n",
        b"*1\r\n:5\r\n",
        b"*1\r\n$-5\r\n",
        b"*1\r\n$3\r\nabcdef\r\n",
        b"*99999999\r\n",
        b"*1\r\n$2000\r\n",
    ];
    for input in bad_inputs {
        let mut c = s.raw();
        c.send(input);
        let reply = c.reply();
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{input:?}: {reply}"
        );
        assert!(c.closed(), "{input:?} left the connection open");
        assert_eq!(good.cmd(&["BF.EXISTS", "k", "x"]), ":1\r\n");
    }
    // A line longer than 64 KiB without a newline.
    let mut c = s.raw();
    c.send(&vec![b'a'; 70 * 1024]);
    assert!(c.reply().starts_with("-ERR Protocol error"));
    assert!(c.closed());
    // A client that disconnects mid-request does not disturb anyone.
    {
        let mut c = s.raw();
        c.send(b"*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$10\r\nabc");
    }
    // Inline commands work, as in Redis.
    let mut c = s.raw();
    c.send(b"PING\r\n");
    assert_eq!(c.reply(), "+PONG\r\n");
    assert_eq!(good.cmd(&["BF.CARD", "k"]), ":1\r\n");
}

fn fill(s: &Server) {
    let mut c = s.client();
    let _: () = redis::cmd("BF.RESERVE")
        .arg("r")
        .arg(0.001)
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let mut add = redis::cmd("BF.MADD");
    add.arg("auto");
    for i in 0..500 {
        add.arg(i);
    }
    let _: Vec<i64> = add.query(&mut c).unwrap();
    let _: Vec<i64> = redis::cmd("BF.INSERT")
        .arg("ns")
        .arg("CAPACITY")
        .arg(2)
        .arg("NONSCALING")
        .arg("ITEMS")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("BF.ADD")
        .arg("r")
        .arg("hello")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("EXPIRE")
        .arg("r")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
}

fn verify(s: &Server) {
    let mut c = s.client();
    let card: i64 = redis::cmd("BF.CARD").arg("auto").query(&mut c).unwrap();
    assert!(card > 490 && card <= 500, "{card}");
    let filters: Vec<i64> = redis::cmd("BF.INFO")
        .arg("auto")
        .arg("FILTERS")
        .query(&mut c)
        .unwrap();
    assert_eq!(filters, vec![3]);
    for i in 0..500 {
        assert!(
            redis::cmd("BF.EXISTS")
                .arg("auto")
                .arg(i)
                .query::<bool>(&mut c)
                .unwrap()
        );
    }
    let full: String = redis::cmd("BF.ADD")
        .arg("ns")
        .arg("c")
        .query::<i64>(&mut c)
        .map(|v| v.to_string())
        .unwrap_or_else(|e| e.to_string());
    assert!(full.contains("non scaling filter is full"), "{full}");
    assert!(
        redis::cmd("BF.EXISTS")
            .arg("r")
            .arg("hello")
            .query::<bool>(&mut c)
            .unwrap()
    );
    let ttl: i64 = redis::cmd("TTL").arg("r").query(&mut c).unwrap();
    assert!(ttl > 900 && ttl <= 1000, "{ttl}");
    let v: String = redis::cmd("GET").arg("str").query(&mut c).unwrap();
    assert_eq!(v, "v");
}

#[test]
fn restart_after_save_keeps_the_data() {
    let dir = temp_dir("save");
    let s = Server::start_in(&dir, &["--save", ""]);
    fill(&s);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SAVE"]), "+OK\r\n");
    // Written after the snapshot and not saved: lost in a crash without the log.
    assert_eq!(c.cmd(&["BF.ADD", "later", "x"]), ":1\r\n");
    s.kill();
    let s = Server::start_in(&dir, &["--save", ""]);
    verify(&s);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["EXISTS", "later"]), ":0\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), ":4\r\n");
    // BGSAVE, then SHUTDOWN (which saves when save points are set).
    assert_eq!(c.cmd(&["BF.ADD", "bg", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["BGSAVE"]), "+Background saving started\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c
        .cmd(&["INFO", "persistence"])
        .contains("rdb_bgsave_in_progress:0")
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    s.kill();
    let s = Server::start_in(&dir, &["--save", "3600 1"]);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.EXISTS", "bg", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "atexit", "x"]), ":1\r\n");
    c.send(&common::encode(&[b"SHUTDOWN"]));
    assert!(c.closed());
    assert!(s.wait_exit().success());
    let s = Server::start_in(&dir, &["--save", ""]);
    verify(&s);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.EXISTS", "atexit", "x"]), ":1\r\n");
    // SHUTDOWN NOSAVE leaves the snapshot as it was.
    assert_eq!(c.cmd(&["BF.ADD", "nosave", "x"]), ":1\r\n");
    c.send(&common::encode(&[b"SHUTDOWN", b"NOSAVE"]));
    assert!(c.closed());
    assert!(s.wait_exit().success());
    let s = Server::start_in(&dir, &["--save", ""]);
    assert_eq!(s.raw().cmd(&["EXISTS", "nosave"]), ":0\r\n");
}

#[test]
fn save_points_snapshot_in_the_background() {
    let dir = temp_dir("savepoints");
    let s = Server::start_in(&dir, &["--save", "1 1"]);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.ADD", "k", "x"]), ":1\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c
        .cmd(&["INFO", "persistence"])
        .contains("rdb_changes_since_last_save:0\r\n")
    {
        assert!(Instant::now() < deadline, "no background save");
        std::thread::sleep(Duration::from_millis(50));
    }
    s.kill();
    let s = Server::start_in(&dir, &["--save", ""]);
    assert_eq!(s.raw().cmd(&["BF.EXISTS", "k", "x"]), ":1\r\n");
}

#[test]
fn append_only_log_survives_a_crash() {
    let dir = temp_dir("aof");
    let flags = [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    let s = Server::start_in(&dir, &flags);
    fill(&s);
    let mut c = s.raw();
    // Renames, deletes, merges and expiries replay too.
    for cmd in [
        &["BF.ADD", "tmp", "x"][..],
        &["RENAME", "tmp", "renamed"],
        &["BF.ADD", "gone", "x"],
        &["DEL", "gone"],
        &["BF.RESERVE", "m1", "0.01", "100"],
        &["BF.ADD", "m1", "q"],
        &["BF.MERGE", "m2", "m1"],
        &["BF.ADD", "short", "x"],
        &["PEXPIRE", "short", "100"],
    ] {
        assert!(!c.cmd(cmd).starts_with('-'), "{cmd:?}");
    }
    s.kill();
    std::thread::sleep(Duration::from_millis(150));
    let s = Server::start_in(&dir, &flags);
    verify_with_extras(&s, 7);
    // A snapshot in the middle: the log restarts after it, nothing is replayed twice.
    let mut c = s.raw();
    let before = std::fs::metadata(dir.join("appendonly.tmbd"))
        .unwrap()
        .len();
    assert_eq!(c.cmd(&["SAVE"]), "+OK\r\n");
    let after = std::fs::metadata(dir.join("appendonly.tmbd"))
        .unwrap()
        .len();
    assert!(
        after < before,
        "the log was not rewritten: {before} -> {after}"
    );
    assert_eq!(c.cmd(&["BF.ADD", "rw", "x"]), ":1\r\n");
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        "+Background append only file rewriting started\r\n"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c
        .cmd(&["INFO", "persistence"])
        .contains("rdb_bgsave_in_progress:0")
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.cmd(&["DEL", "rw"]), ":1\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "after", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "auto", "new-after-save"]), ":1\r\n");
    let card = c.cmd(&["BF.CARD", "auto"]);
    s.kill();
    let s = Server::start_in(&dir, &flags);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.EXISTS", "after", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["BF.CARD", "auto"]), card);
    verify_with_extras(&s, 8);
    s.kill();
    // A torn last record (a crash mid-write) is dropped with a warning.
    let aof = dir.join("appendonly.tmbd");
    let mut f = std::fs::OpenOptions::new().append(true).open(&aof).unwrap();
    f.write_all(&[40, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(f);
    let s = Server::start_in(&dir, &flags);
    assert!(s.log().contains("dropped a torn record"), "{}", s.log());
    verify_with_extras(&s, 8);
}

fn verify_with_extras(s: &Server, keys: i64) {
    verify_without_dbsize(s);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.EXISTS", "renamed", "x"]), ":1\r\n");
    assert_eq!(c.cmd(&["EXISTS", "tmp", "gone", "short"]), ":0\r\n");
    assert_eq!(c.cmd(&["BF.EXISTS", "m2", "q"]), ":1\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), format!(":{keys}\r\n"));
}

fn verify_without_dbsize(s: &Server) {
    let mut c = s.client();
    let card: i64 = redis::cmd("BF.CARD").arg("auto").query(&mut c).unwrap();
    assert!(card > 490 && card <= 501, "{card}");
    assert!(
        redis::cmd("BF.EXISTS")
            .arg("r")
            .arg("hello")
            .query::<bool>(&mut c)
            .unwrap()
    );
    let ttl: i64 = redis::cmd("TTL").arg("r").query(&mut c).unwrap();
    assert!(ttl > 900 && ttl <= 1000, "{ttl}");
}

#[test]
fn corrupt_files_stop_the_start() {
    let dir = temp_dir("corrupt");
    let s = Server::start_in(&dir, &["--save", "", "--appendonly", "yes"]);
    fill(&s);
    assert_eq!(s.raw().cmd(&["SAVE"]), "+OK\r\n");
    assert_eq!(s.raw().cmd(&["BF.ADD", "x", "y"]), ":1\r\n");
    s.kill();
    // A flipped byte in the snapshot.
    let snap = dir.join("dump.tmbd");
    let good = std::fs::read(&snap).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x10;
    std::fs::write(&snap, &bad).unwrap();
    let err = start_fails(&dir, &["--save", ""]);
    assert!(
        err.contains("corrupt snapshot file") && err.contains("checksum"),
        "{err}"
    );
    // A truncated snapshot.
    std::fs::write(&snap, &good[..good.len() - 3]).unwrap();
    let err = start_fails(&dir, &["--save", ""]);
    assert!(err.contains("corrupt snapshot file"), "{err}");
    std::fs::write(&snap, &good).unwrap();
    // A flipped byte inside a log record.
    let aof = dir.join("appendonly.tmbd");
    let log = std::fs::read(&aof).unwrap();
    assert!(log.len() > 30);
    let mut bad = log.clone();
    let at = bad.len() - 3;
    bad[at] ^= 0x01;
    std::fs::write(&aof, &bad).unwrap();
    let err = start_fails(&dir, &["--save", "", "--appendonly", "yes"]);
    assert!(
        err.contains("corrupt append-only file") && err.contains("checksum"),
        "{err}"
    );
    std::fs::write(&aof, &log).unwrap();
    let s = Server::start_in(&dir, &["--save", "", "--appendonly", "yes"]);
    verify(&s);
}

#[test]
fn config_file_and_flags() {
    let dir = temp_dir("config");
    let conf = dir.join("bloomd.conf");
    std::fs::write(
        &conf,
        "# test config\nsave \"\"\nappendonly yes\nmaxmemory 64mb\nrequirepass pw\n",
    )
    .unwrap();
    let s = Server::start_in(&dir, &[conf.to_str().unwrap()]);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["AUTH", "pw"]), "+OK\r\n");
    let info = c.cmd(&["INFO", "persistence", "memory"]);
    assert!(
        info.contains("aof_enabled:1") && info.contains("maxmemory:67108864"),
        "{info}"
    );
    let bad = dir.join("bad.conf");
    std::fs::write(&bad, "frobnicate yes\n").unwrap();
    let err = start_fails(&dir, &[bad.to_str().unwrap()]);
    assert!(err.contains("unknown setting"), "{err}");
}

#[test]
fn sigterm_saves_before_exiting() {
    let dir = temp_dir("sigterm");
    let s = Server::start_in(&dir, &["--save", "3600 1"]);
    assert_eq!(s.raw().cmd(&["BF.ADD", "k", "x"]), ":1\r\n");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(s.wait_exit().success());
    let s = Server::start_in(&dir, &["--save", ""]);
    assert_eq!(s.raw().cmd(&["BF.EXISTS", "k", "x"]), ":1\r\n");
}

/// A small deterministic generator (no dependency, fixed seeds).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Everything a client can observe about the keys and items used by `random_writes`.
fn observe(s: &Server) -> Vec<String> {
    let mut c = s.raw();
    let mut keys: Vec<String> = (0..6).map(|k| format!("k{k}")).collect();
    keys.push("dst".into());
    let items: Vec<String> = (0..300).map(|i| format!("i{i}")).collect();
    let mut seen = Vec::new();
    for k in &keys {
        let t = c.cmd(&["TYPE", k]);
        seen.push(format!("{k} {t}"));
        if t == "+MBbloom--\r\n" {
            seen.push(c.cmd(&["BF.INFO", k]));
            let mut args = vec!["BF.MEXISTS", k.as_str()];
            args.extend(items.iter().map(String::as_str));
            seen.push(c.cmd(&args));
            let ttl = c.cmd(&["TTL", k]);
            seen.push(format!("ttl set: {}", ttl != ":-1\r\n"));
        }
    }
    seen
}

fn random_writes(s: &Server, seed: u64, ops: usize) {
    let mut c = s.raw();
    let mut rng = Lcg(seed);
    for _ in 0..ops {
        let k = format!("k{}", rng.next(6));
        let k2 = format!("k{}", rng.next(6));
        let item = format!("i{}", rng.next(300));
        let item2 = format!("i{}", rng.next(300));
        let cmd: Vec<String> = match rng.next(100) {
            0..=39 => vec!["BF.ADD".into(), k, item],
            40..=54 => vec!["BF.MADD".into(), k, item, item2],
            55..=59 => vec!["BF.RESERVE".into(), k, "0.01".into(), "20".into()],
            60..=64 => vec![
                "BF.INSERT".into(),
                k,
                "CAPACITY".into(),
                "5".into(),
                "NONSCALING".into(),
                "ITEMS".into(),
                item,
            ],
            65..=69 => vec!["DEL".into(), k],
            70..=73 => vec!["RENAME".into(), k, k2],
            74..=77 => vec!["EXPIRE".into(), k, "100000".into()],
            78..=80 => vec!["PERSIST".into(), k],
            81..=85 => vec!["BF.MERGE".into(), "dst".into(), k],
            86 => vec!["FLUSHALL".into()],
            _ => vec!["BF.EXISTS".into(), k, item],
        };
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let _ = c.cmd(&args);
    }
}

#[test]
fn the_log_replays_to_the_same_state_under_concurrent_writers() {
    let dir = temp_dir("replay");
    let flags = [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    let s = Server::start_in(&dir, &flags);
    // Four clients write to the same keys at once; a SAVE lands in the middle.
    let url_port = s.port;
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let s = ServerRef {
                    port: url_port,
                    dir,
                };
                random_writes(&s.attach(), 1000 + t, 1500);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.raw().cmd(&["SAVE"]), "+OK\r\n");
    for w in writers {
        w.join().unwrap();
    }
    let before = observe(&s);
    s.kill();
    let s = Server::start_in(&dir, &flags);
    assert_eq!(observe(&s), before);
}

/// A second handle on a running server, for threads (it never kills the process).
struct ServerRef {
    port: u16,
    dir: std::path::PathBuf,
}

impl ServerRef {
    fn attach(&self) -> Server {
        Server::attach(self.port, &self.dir)
    }
}

#[test]
fn generic_commands_through_the_redis_crate() {
    let dir = temp_dir("generic-crate");
    let s = Server::start_in(&dir, &["--save", ""]);
    let mut c = s.client();
    let q = |c: &mut redis::Connection, args: &[&str]| -> redis::RedisResult<redis::Value> {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(c)
    };
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let echo: String = redis::cmd("ECHO").arg("hey").query(&mut c).unwrap();
    assert_eq!(echo, "hey");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("rs")
        .query(&mut c)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut c).unwrap();
    assert_eq!(name, "rs");
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    assert!(id > 0);
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    assert!(q(&mut c, &["SELECT", "3"]).is_err());
    let count: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert_eq!(count, 48);
    assert!(q(&mut c, &["COMMAND", "DOCS"]).is_ok());
    assert!(q(&mut c, &["COMMAND"]).is_ok());
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(info.contains("# Keyspace"));
    for k in ["a", "b", "c"] {
        let _: i64 = redis::cmd("BF.ADD").arg(k).arg("x").query(&mut c).unwrap();
    }
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 3);
    let n: i64 = redis::cmd("EXISTS")
        .arg("a")
        .arg("b")
        .arg("z")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let t: String = redis::cmd("TYPE").arg("a").query(&mut c).unwrap();
    assert_eq!(t, "MBbloom--");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert_eq!(keys, vec!["a", "b", "c"]);
    let _: () = redis::cmd("RENAME")
        .arg("c")
        .arg("d")
        .query(&mut c)
        .unwrap();
    let set: bool = redis::cmd("EXPIRE").arg("d").arg(50).query(&mut c).unwrap();
    assert!(set);
    let ttl: i64 = redis::cmd("TTL").arg("d").query(&mut c).unwrap();
    assert!((49..=50).contains(&ttl));
    let done: bool = redis::cmd("PERSIST").arg("d").query(&mut c).unwrap();
    assert!(done);
    let n: i64 = redis::cmd("DEL").arg("a").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("UNLINK")
        .arg("b")
        .arg("zz")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let (cursor, keys): (u64, Vec<String>) = redis::cmd("SCAN").arg(0).query(&mut c).unwrap();
    assert_eq!((cursor, keys), (0, vec!["d".to_string()]));
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let last: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    assert!(last > 1_700_000_000);
    let started: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(started, "Background saving started");
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
    let err = q(&mut c, &["NOPE", "x"]).unwrap_err();
    assert!(err.to_string().contains("unknown command 'NOPE'"), "{err}");

    // A RESP3 connection (the crate sends HELLO 3) uses the BF commands just the same.
    let url = format!("redis://127.0.0.1:{}/?protocol=resp3", s.port);
    let mut c3 = redis::Client::open(url).unwrap().get_connection().unwrap();
    let added: i64 = redis::cmd("BF.ADD")
        .arg("r3")
        .arg("x")
        .query(&mut c3)
        .unwrap();
    assert_eq!(added, 1);
    let hello = q(&mut c3, &["HELLO", "3"]).unwrap();
    assert!(matches!(hello, redis::Value::Map(_)), "{hello:?}");
    let missing = q(&mut c3, &["GET", "none"]).unwrap();
    assert_eq!(missing, redis::Value::Nil);

    let _: () = redis::cmd("QUIT").query(&mut c).unwrap();
    let _ = q(&mut c3, &["SHUTDOWN", "NOSAVE"]);
    assert!(s.wait_exit().success());
}

#[test]
fn a_lower_maxmemory_does_not_drop_logged_data_on_restart() {
    let dir = temp_dir("oom-replay");
    let s = Server::start_in(&dir, &["--save", "", "--appendonly", "yes"]);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.RESERVE", "big", "0.01", "1000000"]), "+OK\r\n");
    assert_eq!(c.cmd(&["BF.ADD", "big", "x"]), ":1\r\n");
    s.kill();
    let s = Server::start_in(
        &dir,
        &["--save", "", "--appendonly", "yes", "--maxmemory", "100kb"],
    );
    let mut c = s.raw();
    assert_eq!(c.cmd(&["BF.EXISTS", "big", "x"]), ":1\r\n");
    assert_eq!(
        c.cmd(&["BF.ADD", "big", "y"]),
        "-OOM command not allowed when used memory > 'maxmemory'.\r\n"
    );
}
