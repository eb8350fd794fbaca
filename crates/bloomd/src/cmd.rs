//! Command dispatch and the generic (non-`BF.*`) commands a Redis client needs.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::bf::{self, WRONGTYPE, arity};
use crate::glob::glob_match;
use crate::resp::{Out, parse_i64};
use crate::server::Shared;
use crate::store::{NO_EXPIRY, Slot, Value, now_ms};

/// Per-connection state.
#[derive(Debug, Default)]
pub struct Session {
    /// `CLIENT ID`.
    pub id: u64,
    /// `CLIENT SETNAME`.
    pub name: Vec<u8>,
    /// True once `AUTH` succeeded (or when no password is set).
    pub authed: bool,
    /// Set by `QUIT`: close after the reply.
    pub close: bool,
    /// True for the append-only log's replay: no auth, no memory limit, no save commands.
    pub replay: bool,
}

/// A command's static description (for `COMMAND` and arity checks).
#[derive(Debug, Clone, Copy)]
pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: exact when positive, minimum when negative (the name counts).
    pub arity: i64,
    /// Flags as `COMMAND INFO` lists them.
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i64,
    /// Last key argument (-1: the last argument).
    pub last_key: i64,
    /// Step between keys.
    pub step: i64,
}

const W: &[&str] = &["write", "denyoom"];
const R: &[&str] = &["readonly", "fast"];
const F: &[&str] = &["fast"];
const A: &[&str] = &["admin", "noscript"];

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    first_key: i64,
    last_key: i64,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key,
        last_key,
        step: if first_key == 0 { 0 } else { 1 },
    }
}

/// Every command the server knows.
pub const COMMANDS: &[CommandSpec] = &[
    spec("bf.reserve", -4, W, 1, 1),
    spec("bf.add", 3, W, 1, 1),
    spec("bf.madd", -3, W, 1, 1),
    spec("bf.insert", -4, W, 1, 1),
    spec("bf.exists", 3, R, 1, 1),
    spec("bf.mexists", -3, R, 1, 1),
    spec("bf.info", -2, R, 1, 1),
    spec("bf.card", 2, R, 1, 1),
    spec("bf.debug", 2, R, 1, 1),
    spec("bf.scandump", 3, R, 1, 1),
    spec("bf.loadchunk", 4, W, 1, 1),
    spec("bf.merge", -3, W, 1, -1),
    spec("ping", -1, F, 0, 0),
    spec("echo", 2, F, 0, 0),
    spec("hello", -1, F, 0, 0),
    spec("auth", -2, F, 0, 0),
    spec("client", -2, F, 0, 0),
    spec("select", 2, F, 0, 0),
    spec("command", -1, F, 0, 0),
    spec("info", -1, F, 0, 0),
    spec("config", -2, A, 0, 0),
    spec("time", 1, F, 0, 0),
    spec("dbsize", 1, R, 0, 0),
    spec("exists", -2, R, 1, -1),
    spec("del", -2, &["write"], 1, -1),
    spec("unlink", -2, &["write", "fast"], 1, -1),
    spec("type", 2, R, 1, 1),
    spec("keys", 2, &["readonly"], 0, 0),
    spec("scan", -2, &["readonly"], 0, 0),
    spec("rename", 3, &["write"], 1, 2),
    spec("expire", -3, &["write", "fast"], 1, 1),
    spec("pexpire", -3, &["write", "fast"], 1, 1),
    spec("expireat", -3, &["write", "fast"], 1, 1),
    spec("pexpireat", -3, &["write", "fast"], 1, 1),
    spec("ttl", 2, R, 1, 1),
    spec("pttl", 2, R, 1, 1),
    spec("persist", 2, &["write", "fast"], 1, 1),
    spec("flushdb", -1, &["write"], 0, 0),
    spec("flushall", -1, &["write"], 0, 0),
    spec("save", 1, A, 0, 0),
    spec("bgsave", -1, A, 0, 0),
    spec("bgrewriteaof", 1, A, 0, 0),
    spec("memory", -2, R, 0, 0),
    spec("lastsave", 1, F, 0, 0),
    spec("shutdown", -1, A, 0, 0),
    spec("quit", -1, F, 0, 0),
    spec("set", 3, W, 1, 1),
    spec("get", 2, R, 1, 1),
];

/// The spec of `name` (lower case).
pub fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name.as_bytes() == name)
}

fn unknown_command(out: &mut Out, args: &[&[u8]]) {
    // Redis 7's form: the name, then up to 128 characters of quoted arguments.
    let mut msg = String::from("ERR unknown command '");
    let name = String::from_utf8_lossy(args.first().copied().unwrap_or_default());
    msg.extend(name.chars().take(128));
    msg.push_str("', with args beginning with: ");
    let mut budget = 128usize;
    for a in args.iter().skip(1) {
        if budget == 0 {
            break;
        }
        let text = String::from_utf8_lossy(a);
        let part: String = text.chars().take(budget).collect();
        budget = budget.saturating_sub(part.chars().count());
        msg.push('\'');
        msg.push_str(&part);
        msg.push_str("' ");
    }
    out.error(&msg);
}

fn not_integer(out: &mut Out) {
    out.error("ERR value is not an integer or out of range");
}

fn syntax(out: &mut Out) {
    out.error("ERR syntax error");
}

/// Runs one command. Returns true when the server should shut down.
pub fn execute(sh: &Arc<Shared>, sess: &mut Session, args: &[&[u8]], out: &mut Out) -> bool {
    let Some(first) = args.first() else {
        return false;
    };
    let mut lower = [0u8; 16];
    let name: &[u8] = if first.len() <= lower.len() {
        for (d, s) in lower.iter_mut().zip(first.iter()) {
            *d = s.to_ascii_lowercase();
        }
        &lower[..first.len()]
    } else {
        return {
            unknown_command(out, args);
            false
        };
    };
    let Some(spec) = find(name) else {
        unknown_command(out, args);
        return false;
    };
    if !sess.authed && !matches!(spec.name, "auth" | "hello" | "quit") {
        out.error("NOAUTH Authentication required.");
        return false;
    }
    if spec.name.starts_with("bf.") {
        bf::dispatch(&sh.db, name, args, out);
        return false;
    }
    let n = args.len() as i64;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        arity(out, spec.name);
        return false;
    }
    if spec.flags.contains(&"denyoom") && sh.db.over_limit(0) {
        out.error(bf::OOM);
        return false;
    }
    generic(sh, sess, spec.name, args, out)
}

fn bulk_str(out: &mut Out, s: &str) {
    out.bulk(s.as_bytes());
}

fn generic(
    sh: &Arc<Shared>,
    sess: &mut Session,
    name: &str,
    args: &[&[u8]],
    out: &mut Out,
) -> bool {
    let db = &sh.db;
    match name {
        "ping" => match args.len() {
            1 => out.simple("PONG"),
            2 => out.bulk(args[1]),
            _ => arity(out, "ping"),
        },
        "echo" => out.bulk(args[1]),
        "quit" => {
            out.ok();
            sess.close = true;
        }
        "auth" => auth(sh, sess, &args[1..], out),
        "hello" => hello(sh, sess, args, out),
        "client" => client(sess, args, out),
        "select" => match parse_i64(args[1]) {
            Some(0) => out.ok(),
            Some(_) => out.error("ERR DB index is out of range"),
            None => not_integer(out),
        },
        "command" => command(args, out),
        "info" => {
            let text = crate::server::info_text(sh, &args[1..]);
            out.bulk(text.as_bytes());
        }
        "config" => config(sh, args, out),
        "time" => {
            let us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros())
                .unwrap_or(0);
            out.array(2);
            bulk_str(out, &(us / 1_000_000).to_string());
            bulk_str(out, &(us % 1_000_000).to_string());
        }
        "dbsize" => out.uint(db.len() as u64),
        "exists" => {
            let n = args[1..]
                .iter()
                .filter(|k| db.access(k, false, false, |slot, _| matches!(slot, Slot::Live(_))))
                .count();
            out.uint(n as u64);
        }
        "del" | "unlink" => {
            let _gate = db.gate_shared();
            let n = args[1..].iter().filter(|k| db.delete(k)).count();
            out.uint(n as u64);
        }
        "type" => {
            let t = db.access(args[1], false, false, |slot, _| match slot {
                Slot::Live(v) => v.type_name(),
                _ => "none",
            });
            out.simple(t);
        }
        "keys" => {
            let now = now_ms();
            let mut keys: Vec<Vec<u8>> = db
                .entries()
                .into_iter()
                .filter(|e| e.expire_ms() > now && glob_match(args[1], e.key()))
                .map(|e| e.key().to_vec())
                .collect();
            // Sorted, so that the answer does not depend on the map's layout.
            keys.sort_unstable();
            out.array(keys.len());
            for k in keys {
                out.bulk(&k);
            }
        }
        "scan" => scan(sh, args, out),
        "rename" => rename(sh, args, out),
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(sh, name, args, out),
        "ttl" | "pttl" => {
            let ms = db.access(args[1], false, false, |slot, e| match (slot, e) {
                (Slot::Live(_), Some(e)) if e.expire_ms() == NO_EXPIRY => -1,
                (Slot::Live(_), Some(e)) => (e.expire_ms() - now_ms()).max(0),
                _ => -2,
            });
            if ms < 0 || name == "pttl" {
                out.int(ms);
            } else {
                out.int((ms + 500) / 1000);
            }
        }
        "persist" => {
            let _gate = db.gate_shared();
            let done = db.access(args[1], false, true, |slot, e| match (slot, e) {
                (Slot::Live(_), Some(e)) if e.expire_ms() != NO_EXPIRY => {
                    e.set_expire_ms(NO_EXPIRY);
                    db.log(&[b"PERSIST", args[1]]);
                    db.touch();
                    true
                }
                _ => false,
            });
            out.int(i64::from(done));
        }
        "flushdb" | "flushall" => {
            if args.len() > 2
                || args.get(1).is_some_and(|a| {
                    !a.eq_ignore_ascii_case(b"ASYNC") && !a.eq_ignore_ascii_case(b"SYNC")
                })
            {
                syntax(out);
            } else {
                let _gate = db.gate_exclusive();
                db.clear();
                db.log(&[b"FLUSHALL"]);
                db.touch();
                out.ok();
            }
        }
        "save" => {
            if sess.replay {
                out.ok();
            } else {
                match sh.save() {
                    Ok(()) => out.ok(),
                    Err(e) => out.error(&format!("ERR {e}")),
                }
            }
        }
        "bgsave" => {
            if sess.replay {
                out.ok();
            } else if sh.bgsave() {
                out.simple("Background saving started");
            } else {
                out.error("ERR Background save already in progress");
            }
        }
        "bgrewriteaof" => {
            // A snapshot is our log rewrite: the log restarts after what it covers.
            if sess.replay {
                out.ok();
            } else if !sh.config.appendonly {
                out.error("ERR append only file is disabled (start with --appendonly yes)");
            } else if sh.bgsave() {
                out.simple("Background append only file rewriting started");
            } else {
                out.error("ERR Background save already in progress");
            }
        }
        "memory" => {
            let sub = args[1].to_ascii_lowercase();
            if sub == b"usage" && (args.len() == 3 || args.len() == 5) {
                match db.lookup(args[2]) {
                    Some(e) => out.uint(e.mem_bytes()),
                    None => out.null(),
                }
            } else {
                out.error(&format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
                    String::from_utf8_lossy(args[1])
                ));
            }
        }
        "lastsave" => out.int(sh.lastsave.load(Ordering::Relaxed)),
        "shutdown" => {
            let mut save = None;
            for a in &args[1..] {
                if a.eq_ignore_ascii_case(b"NOSAVE") {
                    save = Some(false);
                } else if a.eq_ignore_ascii_case(b"SAVE") {
                    save = Some(true);
                } else if a.eq_ignore_ascii_case(b"NOW") || a.eq_ignore_ascii_case(b"FORCE") {
                } else {
                    syntax(out);
                    return false;
                }
            }
            if sess.replay {
                return false;
            }
            match sh.prepare_shutdown(save) {
                Ok(()) => return true,
                Err(e) => {
                    eprintln!("tidemark-bloomd: shutdown save failed: {e}");
                    out.error("ERR Errors trying to SHUTDOWN. Check logs.");
                }
            }
        }
        "set" => {
            let _gate = db.gate_shared();
            db.access(args[1], true, true, |slot, e| {
                *slot = Slot::Live(Value::Str(args[2].to_vec()));
                if let Some(e) = e {
                    e.set_expire_ms(NO_EXPIRY);
                }
                db.log(args);
                db.touch();
            });
            out.ok();
        }
        "get" => {
            let r = db.access(args[1], false, false, |slot, _| match slot {
                Slot::Live(Value::Str(s)) => Ok(Some(s.clone())),
                Slot::Live(_) => Err(()),
                _ => Ok(None),
            });
            match r {
                Ok(Some(v)) => out.bulk(&v),
                Ok(None) => out.null(),
                Err(()) => out.error(WRONGTYPE),
            }
        }
        _ => unknown_command(out, args),
    }
    false
}

fn auth(sh: &Shared, sess: &mut Session, args: &[&[u8]], out: &mut Out) {
    let (user, pass) = match args {
        [pass] => (None, *pass),
        [user, pass] => (Some(*user), *pass),
        _ => return syntax(out),
    };
    let Some(expected) = sh.config.requirepass.as_deref() else {
        if user.is_some() {
            return out.error("WRONGPASS invalid username-password pair or user is disabled.");
        }
        return out.error(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        );
    };
    if user.is_none_or(|u| u == b"default") && pass == expected.as_bytes() {
        sess.authed = true;
        out.ok();
    } else {
        out.error("WRONGPASS invalid username-password pair or user is disabled.");
    }
}

fn hello(sh: &Shared, sess: &mut Session, args: &[&[u8]], out: &mut Out) {
    let mut i = 1;
    if let Some(v) = args.get(1) {
        match parse_i64(v) {
            Some(2) => out.resp3 = false,
            Some(3) => out.resp3 = true,
            Some(_) => return out.error("NOPROTO unsupported protocol version"),
            None => return out.error("ERR Protocol version is not an integer or out of range"),
        }
        i = 2;
    }
    while i < args.len() {
        let w = args[i];
        if w.eq_ignore_ascii_case(b"AUTH") && i + 2 < args.len() {
            let mut tmp = Out::default();
            auth(sh, sess, &args[i + 1..i + 3], &mut tmp);
            if !sess.authed {
                return out.error("WRONGPASS invalid username-password pair or user is disabled.");
            }
            i += 3;
        } else if w.eq_ignore_ascii_case(b"SETNAME") && i + 1 < args.len() {
            sess.name = args[i + 1].to_vec();
            i += 2;
        } else {
            return out.error(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(w)
            ));
        }
    }
    if !sess.authed {
        return out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    out.map(7);
    bulk_str(out, "server");
    bulk_str(out, "tidemark-bloomd");
    bulk_str(out, "version");
    bulk_str(out, env!("CARGO_PKG_VERSION"));
    bulk_str(out, "proto");
    out.int(if out.resp3 { 3 } else { 2 });
    bulk_str(out, "id");
    out.uint(sess.id);
    bulk_str(out, "mode");
    bulk_str(out, "standalone");
    bulk_str(out, "role");
    bulk_str(out, "master");
    bulk_str(out, "modules");
    out.array(1);
    out.map(2);
    bulk_str(out, "name");
    bulk_str(out, "bf");
    bulk_str(out, "ver");
    out.int(20423);
}

fn client(sess: &mut Session, args: &[&[u8]], out: &mut Out) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"setname", 3) => {
            if args[2].iter().any(|&b| b <= b' ' || b > b'~') {
                out.error(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            } else {
                sess.name = args[2].to_vec();
                out.ok();
            }
        }
        (b"getname", 2) => {
            if sess.name.is_empty() {
                out.null();
            } else {
                out.bulk(&sess.name);
            }
        }
        (b"id", 2) => out.uint(sess.id),
        (b"setinfo", 4) => out.ok(),
        (b"info" | b"list", _) => {
            let line = format!(
                "id={} addr=? name={} db=0 cmd=client|{}\n",
                sess.id,
                String::from_utf8_lossy(&sess.name),
                String::from_utf8_lossy(&sub)
            );
            out.bulk(line.as_bytes());
        }
        (b"setname" | b"getname" | b"id" | b"setinfo", _) => {
            arity(out, &format!("client|{}", String::from_utf8_lossy(&sub)))
        }
        _ => out.error(&format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(args[1])
        )),
    }
}

fn command_info(out: &mut Out, c: &CommandSpec) {
    out.array(10);
    bulk_str(out, c.name);
    out.int(c.arity);
    out.array(c.flags.len());
    for f in c.flags {
        out.simple(f);
    }
    out.int(c.first_key);
    out.int(c.last_key);
    out.int(c.step);
    out.array(0);
    out.array(0);
    out.array(0);
    out.array(0);
}

fn command(args: &[&[u8]], out: &mut Out) {
    let Some(sub) = args.get(1) else {
        out.array(COMMANDS.len());
        for c in COMMANDS {
            command_info(out, c);
        }
        return;
    };
    match sub.to_ascii_lowercase().as_slice() {
        b"count" => out.uint(COMMANDS.len() as u64),
        b"docs" => {
            // Enough for redis-cli: a map of name to an (empty) doc map.
            let names: Vec<&CommandSpec> = if args.len() > 2 {
                args[2..]
                    .iter()
                    .filter_map(|n| find(&n.to_ascii_lowercase()))
                    .collect()
            } else {
                COMMANDS.iter().collect()
            };
            out.map(names.len());
            for c in names {
                bulk_str(out, c.name);
                out.map(0);
            }
        }
        b"info" => {
            out.array(args.len() - 2);
            for n in &args[2..] {
                match find(&n.to_ascii_lowercase()) {
                    Some(c) => command_info(out, c),
                    None => out.null_array(),
                }
            }
        }
        b"list" => {
            out.array(COMMANDS.len());
            for c in COMMANDS {
                bulk_str(out, c.name);
            }
        }
        _ => out.error(&format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(sub)
        )),
    }
}

fn config(sh: &Shared, args: &[&[u8]], out: &mut Out) {
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" if args.len() >= 3 => {
            let c = &sh.config;
            let save: Vec<String> = c.save.iter().map(|(s, n)| format!("{s} {n}")).collect();
            let params: Vec<(&str, String)> = vec![
                ("bind", c.bind.clone()),
                ("port", sh.port().to_string()),
                ("dir", c.dir.display().to_string()),
                ("dbfilename", c.dbfilename.clone()),
                ("appendfilename", c.appendfilename.clone()),
                ("save", save.join(" ")),
                ("appendonly", if c.appendonly { "yes" } else { "no" }.into()),
                ("maxmemory", c.maxmemory.to_string()),
                ("proto-max-bulk-len", c.max_request_bytes.to_string()),
                ("databases", "1".into()),
            ];
            let hits: Vec<&(&str, String)> = params
                .iter()
                .filter(|(n, _)| args[2..].iter().any(|p| glob_match(p, n.as_bytes())))
                .collect();
            out.map(hits.len());
            for (n, v) in hits {
                bulk_str(out, n);
                bulk_str(out, v);
            }
        }
        b"resetstat" if args.len() == 2 => out.ok(),
        b"set" => out.error("ERR CONFIG SET is not supported; restart with new flags"),
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(args[1])
        )),
    }
}

fn key_hash(key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    // Never 0: cursor 0 means "start" and "done".
    (h.finish() >> 1) | 1
}

fn scan(sh: &Shared, args: &[&[u8]], out: &mut Out) {
    let Some(cursor) = std::str::from_utf8(args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return out.error("ERR invalid cursor");
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut type_filter: Option<Vec<u8>> = None;
    let mut i = 2;
    while i < args.len() {
        let Some(v) = args.get(i + 1) else {
            return syntax(out);
        };
        if args[i].eq_ignore_ascii_case(b"MATCH") {
            pattern = Some(v);
        } else if args[i].eq_ignore_ascii_case(b"COUNT") {
            match parse_i64(v) {
                Some(c) if c >= 1 => count = usize::try_from(c).unwrap_or(usize::MAX),
                Some(_) => return syntax(out),
                None => return not_integer(out),
            }
        } else if args[i].eq_ignore_ascii_case(b"TYPE") {
            type_filter = Some(v.to_ascii_lowercase());
        } else {
            return syntax(out);
        }
        i += 2;
    }
    // The cursor is a position in hash order, so keys added or removed meanwhile never
    // make a scan skip a key that existed throughout.
    let mut entries: Vec<(u64, std::sync::Arc<crate::store::Entry>)> = sh
        .db
        .entries()
        .into_iter()
        .map(|e| (key_hash(e.key()), e))
        .filter(|(h, _)| *h >= cursor)
        .collect();
    entries.sort_unstable_by_key(|(h, _)| *h);
    let mut end = count.min(entries.len());
    while end < entries.len() && end > 0 && entries[end].0 == entries[end - 1].0 {
        end += 1;
    }
    let next = entries.get(end).map_or(0, |(h, _)| *h);
    let now = now_ms();
    let keys: Vec<Vec<u8>> = entries[..end]
        .iter()
        .filter(|(_, e)| e.expire_ms() > now)
        .filter(|(_, e)| pattern.is_none_or(|p| glob_match(p, e.key())))
        .filter(|(_, e)| {
            type_filter.as_ref().is_none_or(|t| {
                let name = match &*e.lock() {
                    Slot::Live(v) => v.type_name(),
                    _ => "none",
                };
                name.eq_ignore_ascii_case(&String::from_utf8_lossy(t))
            })
        })
        .map(|(_, e)| e.key().to_vec())
        .collect();
    out.array(2);
    bulk_str(out, &next.to_string());
    out.array(keys.len());
    for k in keys {
        out.bulk(&k);
    }
}

fn rename(sh: &Shared, args: &[&[u8]], out: &mut Out) {
    let db = &sh.db;
    let _gate = db.gate_exclusive();
    let taken = db.access(args[1], false, true, |slot, e| match slot {
        Slot::Live(_) => {
            let expire = e.map_or(NO_EXPIRY, |e| e.expire_ms());
            match std::mem::replace(slot, Slot::Vacant) {
                Slot::Live(v) => Some((v, expire)),
                _ => None,
            }
        }
        _ => None,
    });
    let Some((value, expire)) = taken else {
        return out.error("ERR no such key");
    };
    db.put(args[2], value, expire);
    db.log(args);
    db.touch();
    out.ok();
}

fn expire(sh: &Shared, name: &str, args: &[&[u8]], out: &mut Out) {
    let db = &sh.db;
    let Some(n) = parse_i64(args[2]) else {
        return not_integer(out);
    };
    let now = now_ms();
    let at = match name {
        "expire" => n.checked_mul(1000).and_then(|ms| ms.checked_add(now)),
        "pexpire" => n.checked_add(now),
        "expireat" => n.checked_mul(1000),
        _ => Some(n),
    };
    let Some(at) = at else {
        return out.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for a in &args[3..] {
        match a.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                return out.error(&format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(a)
                ));
            }
        }
    }
    if (nx && (xx || gt || lt)) || (gt && lt) {
        return out.error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    let _gate = db.gate_shared();
    let done = db.access(args[1], false, true, |slot, e| {
        let (Slot::Live(_), Some(e)) = (&*slot, e) else {
            return false;
        };
        let cur = e.expire_ms();
        let has = cur != NO_EXPIRY;
        if (nx && has) || (xx && !has) || (gt && (!has || at <= cur)) || (lt && has && at >= cur) {
            return false;
        }
        if at <= now_ms() && !db.loading.load(Ordering::Relaxed) {
            *slot = Slot::Vacant;
            db.log(&[b"DEL", args[1]]);
        } else {
            e.set_expire_ms(at);
            db.log(&[b"PEXPIREAT", args[1], at.to_string().as_bytes()]);
        }
        db.touch();
        true
    });
    out.int(i64::from(done));
}
