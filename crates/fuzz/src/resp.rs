//! RESP, the Redis protocol: bloomd's request parser, and the `BF.*` commands it feeds.

use std::ops::Range;

use tidemark_bloom::ScalableLayout;
use tidemark_bloomd::resp::{self, Out, Parser};
use tidemark_bloomd::{bf, store::Db};

/// The longest bulk string accepted (bloomd's default `proto-max-bulk-len` is larger; a
/// small one reaches the refusal with short inputs).
const MAX_BULK: usize = 1 << 16;

/// Memory the keyspace may use: `BF.RESERVE` and growth must refuse past it.
const MAX_MEMORY: u64 = 64 << 20;

/// A connection's bytes: requests parsed one after the other as the server does; each
/// request parsed again as it would arrive in pieces (the resumable [`Parser`] fed a
/// growing prefix) to the same result, and re-encoded as a multibulk request that parses
/// to the same arguments; the `BF.*` commands run against an in-memory keyspace with a
/// memory limit, as the server would run them.
pub fn resp(data: &[u8]) {
    let db = Db::new(MAX_MEMORY, ScalableLayout::Standard);
    let mut at = 0;
    let mut args: Vec<Range<usize>> = Vec::new();
    while let Some(rest) = data.get(at..).filter(|r| !r.is_empty()) {
        let used = match resp::parse(rest, MAX_BULK, &mut args) {
            Ok(Some(used)) => used,
            Ok(None) | Err(_) => break,
        };
        assert!(
            used > 0 && used <= rest.len(),
            "parse used {used} of {} bytes",
            rest.len()
        );
        let Some(request) = rest.get(..used) else {
            break;
        };
        let words: Vec<&[u8]> = args.iter().filter_map(|r| request.get(r.clone())).collect();
        assert_eq!(
            words.len(),
            args.len(),
            "an argument range outside the request"
        );
        check_in_pieces(request, &args);
        check_reencoded(&words);
        run(&db, &words);
        at += used;
    }
}

/// The request fed to one resumable parser a prefix at a time (one byte more each time
/// up to 64, then doubling) gives the ranges of the whole-buffer parse.
fn check_in_pieces(request: &[u8], whole: &[Range<usize>]) {
    // Past 64 KiB without a line end a prefix is refused ("too big ... string") where
    // the whole request is not: Redis does the same.
    if request.len() > 64 << 10 {
        return;
    }
    let mut parser = Parser::default();
    let mut len = 1;
    loop {
        let len_now = len.min(request.len());
        let prefix = request.get(..len_now).unwrap_or_default();
        match parser.parse(prefix, MAX_BULK) {
            Ok(Some(used)) => {
                assert_eq!(
                    used,
                    request.len(),
                    "parsed in pieces, the request ends elsewhere"
                );
                assert_eq!(parser.args(), whole, "parsed in pieces, other arguments");
                return;
            }
            Ok(None) if len_now < request.len() => {}
            other => panic!("parsed in pieces, the whole request gives {other:?}"),
        }
        len = if len < 64 { len + 1 } else { len * 2 };
    }
}

fn check_reencoded(words: &[&[u8]]) {
    let mut encoded = Vec::new();
    resp::encode_command(words, &mut encoded);
    let mut args = Vec::new();
    match resp::parse(&encoded, usize::MAX, &mut args) {
        Ok(Some(used)) => {
            assert_eq!(used, encoded.len(), "an encoded command is not used whole");
            let again: Vec<&[u8]> = args.iter().filter_map(|r| encoded.get(r.clone())).collect();
            if words.is_empty() {
                assert!(again.is_empty());
            } else {
                assert_eq!(again, words, "an encoded command parses to other arguments");
            }
        }
        other => panic!("an encoded command does not parse: {other:?}"),
    }
}

/// Runs a `BF.*` command (the name lower-cased, as the dispatcher expects).
fn run(db: &Db, words: &[&[u8]]) {
    let Some(name) = words.first() else { return };
    if name.len() > 16 {
        return;
    }
    let lower = name.to_ascii_lowercase();
    if !lower.starts_with(b"bf.") {
        return;
    }
    let mut out = Out::default();
    if bf::dispatch(db, &lower, words, &mut out) {
        assert!(!out.buf.is_empty(), "a BF command without a reply");
    }
}
