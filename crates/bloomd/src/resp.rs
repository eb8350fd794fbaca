//! The Redis serialization protocol: a request parser that borrows from the connection's
//! read buffer, and reply writers for RESP2 and the few RESP3 forms the server sends.

use std::ops::Range;

/// Longest inline command or multibulk/bulk header line Redis accepts (64 KiB).
const MAX_INLINE_BYTES: usize = 64 * 1024;

/// Most arguments one multibulk request may carry (Redis' own limit).
const MAX_MULTIBULK_ARGS: i64 = 1024 * 1024;

/// A request the parser refuses. The connection answers `-ERR Protocol error: ...` and is
/// closed, as Redis does; other connections are unaffected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub &'static str);

/// Parses one request at the start of `buf`.
///
/// On success the argument ranges (into `buf`) are written to `args` and the number of bytes
/// the request used is returned; `Ok(None)` means more bytes are needed. An empty request
/// (`*0` or a blank inline line) returns its length with `args` empty.
///
/// # Errors
/// [`ProtocolError`] for malformed input or a bulk string longer than `max_bulk`.
pub fn parse(
    buf: &[u8],
    max_bulk: usize,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    let mut parser = Parser::default();
    let r = parser.parse(buf, max_bulk);
    std::mem::swap(args, &mut parser.args);
    r
}

/// A request parser that resumes where it stopped: when a long request arrives in many
/// reads, the arguments already complete are not parsed again.
#[derive(Debug, Default)]
pub struct Parser {
    args: Vec<Range<usize>>,
    /// `(argument count, offset after the last complete argument)` of an unfinished
    /// multibulk request.
    partial: Option<(usize, usize)>,
}

impl Parser {
    /// Parses one request at the start of `buf`, which must begin with the same bytes as on
    /// the previous call when that call returned `Ok(None)`.
    ///
    /// # Errors
    /// [`ProtocolError`] for malformed input or a bulk string longer than `max_bulk`.
    pub fn parse(&mut self, buf: &[u8], max_bulk: usize) -> Result<Option<usize>, ProtocolError> {
        if self.partial.is_none() {
            self.args.clear();
        }
        let r = match buf.first() {
            None => Ok(None),
            Some(b'*') => self.parse_multibulk(buf, max_bulk),
            Some(_) => parse_inline(buf, &mut self.args),
        };
        if !matches!(r, Ok(None)) {
            self.partial = None;
        }
        r
    }

    /// The ranges of the last complete request's arguments.
    pub fn args(&self) -> &[Range<usize>] {
        &self.args
    }

    fn parse_multibulk(
        &mut self,
        buf: &[u8],
        max_bulk: usize,
    ) -> Result<Option<usize>, ProtocolError> {
        let (count, mut pos) = match self.partial {
            Some(state) => state,
            None => {
                let Some(eol) = find_crlf(buf, 1) else {
                    if buf.len() > MAX_INLINE_BYTES {
                        return Err(ProtocolError("too big mbulk count string"));
                    }
                    return Ok(None);
                };
                let count =
                    parse_i64(&buf[1..eol]).ok_or(ProtocolError("invalid multibulk length"))?;
                if count > MAX_MULTIBULK_ARGS {
                    return Err(ProtocolError("invalid multibulk length"));
                }
                if count <= 0 {
                    return Ok(Some(eol + 2));
                }
                (usize::try_from(count).unwrap_or(0), eol + 2)
            }
        };
        while self.args.len() < count {
            let Some(arg) = parse_bulk(buf, pos, max_bulk)? else {
                self.partial = Some((count, pos));
                return Ok(None);
            };
            pos = arg.end + 2;
            self.args.push(arg);
        }
        Ok(Some(pos))
    }
}

/// One `$len\r\n...\r\n` at `pos`: the data's range, or `None` when incomplete.
fn parse_bulk(
    buf: &[u8],
    pos: usize,
    max_bulk: usize,
) -> Result<Option<Range<usize>>, ProtocolError> {
    match buf.get(pos) {
        None => return Ok(None),
        Some(b'$') => {}
        Some(_) => return Err(ProtocolError("expected '$'")),
    }
    let Some(eol) = find_crlf(buf, pos + 1) else {
        if buf.len() - pos > MAX_INLINE_BYTES {
            return Err(ProtocolError("too big bulk count string"));
        }
        return Ok(None);
    };
    let len = parse_i64(&buf[pos + 1..eol]).ok_or(ProtocolError("invalid bulk length"))?;
    let len = usize::try_from(len).map_err(|_| ProtocolError("invalid bulk length"))?;
    if len > max_bulk {
        return Err(ProtocolError("invalid bulk length"));
    }
    let start = eol + 2;
    let end = start
        .checked_add(len)
        .ok_or(ProtocolError("invalid bulk length"))?;
    if buf.len() < end.saturating_add(2) {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(ProtocolError("bulk string not terminated by CRLF"));
    }
    Ok(Some(start..end))
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    let mut i = 0;
    while let Some(off) = rest
        .get(i..)
        .and_then(|r| r.iter().position(|&b| b == b'\r'))
    {
        let at = i + off;
        match rest.get(at + 1) {
            Some(b'\n') => return Some(from + at),
            Some(_) => i = at + 1,
            None => return None,
        }
    }
    None
}

/// Parses a decimal integer the way Redis' `string2ll` does: optional `-`, digits, no
/// leading zeros except `0` itself, no spaces, no `+`.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (neg, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(d - b'0');
    }
    if neg {
        v = -v;
    }
    if neg && v == 0 && digits.len() == 1 {
        // "-0" is refused by Redis.
        return None;
    }
    i64::try_from(v).ok()
}

fn parse_inline(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Option<usize>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_INLINE_BYTES {
            return Err(ProtocolError("too big inline request"));
        }
        return Ok(None);
    };
    let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    let mut i = 0;
    while i < line_end {
        while i < line_end && buf[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < line_end && !buf[i].is_ascii_whitespace() {
            i += 1;
        }
        if start < i {
            args.push(start..i);
        }
    }
    Ok(Some(nl + 1))
}

/// Appends RESP replies to an output buffer.
#[derive(Debug, Default)]
pub struct Out {
    /// The bytes to send.
    pub buf: Vec<u8>,
    /// True after `HELLO 3`: nulls are `_`, maps are `%`.
    pub resp3: bool,
}

impl Out {
    /// `+text`
    pub fn simple(&mut self, text: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+OK`
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// `-text` (the text carries its own prefix, e.g. `ERR `).
    pub fn error(&mut self, text: &str) {
        self.buf.push(b'-');
        // An error line cannot contain CR or LF.
        for &b in text.as_bytes() {
            self.buf
                .push(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    fn number(&mut self, prefix: u8, n: i64) {
        self.buf.push(prefix);
        let mut tmp = [0u8; 20];
        let mut i = tmp.len();
        let neg = n < 0;
        let mut v = n.unsigned_abs();
        loop {
            i -= 1;
            tmp[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        if neg {
            self.buf.push(b'-');
        }
        self.buf.extend_from_slice(&tmp[i..]);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `:n`
    pub fn int(&mut self, n: i64) {
        self.number(b':', n);
    }

    /// `:n` for an unsigned count (saturating at `i64::MAX`).
    pub fn uint(&mut self, n: u64) {
        self.int(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// `*n`
    pub fn array(&mut self, n: usize) {
        self.number(b'*', i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// `%n` under RESP3, else `*2n`.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.number(b'%', i64::try_from(n).unwrap_or(i64::MAX));
        } else {
            self.array(n * 2);
        }
    }

    /// `$len` + bytes
    pub fn bulk(&mut self, bytes: &[u8]) {
        self.number(b'$', i64::try_from(bytes.len()).unwrap_or(i64::MAX));
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// The null reply: `$-1` (RESP2) or `_` (RESP3).
    pub fn null(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }

    /// The null array: `*-1` (RESP2) or `_` (RESP3).
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }
}

/// Encodes a command as a RESP multibulk request (for the append-only log).
pub fn encode_command(args: &[&[u8]], dst: &mut Vec<u8>) {
    let mut out = Out {
        buf: std::mem::take(dst),
        resp3: false,
    };
    out.array(args.len());
    for a in args {
        out.bulk(a);
    }
    *dst = out.buf;
}

#[cfg(test)]
mod tests {
    use super::*;

    type Words = Option<(Vec<Vec<u8>>, usize)>;

    fn words(buf: &[u8]) -> Result<Words, ProtocolError> {
        let mut ranges = Vec::new();
        Ok(parse(buf, 1 << 20, &mut ranges)?
            .map(|n| (ranges.iter().map(|r| buf[r.clone()].to_vec()).collect(), n)))
    }

    #[test]
    fn parses_multibulk_and_inline() {
        let (a, n) = words(b"*2\r\n$4\r\nPING\r\n$0\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert_eq!(a, vec![b"PING".to_vec(), Vec::new()]);
        assert_eq!(n, 20);
        let (a, n) = words(b"PING  hello\r\n").unwrap().unwrap();
        assert_eq!(a, vec![b"PING".to_vec(), b"hello".to_vec()]);
        assert_eq!(n, 13);
        assert_eq!(words(b"*2\r\n$4\r\nPI").unwrap(), None);
        assert_eq!(words(b"*2\r").unwrap(), None);
    }

    #[test]
    fn rejects_malformed_requests() {
        assert!(words(b"*x\r\n").is_err());
        assert!(words(b"*1\r\n:4\r\n").is_err());
        assert!(words(b"*1\r\n$-4\r\n").is_err());
        assert!(words(b"*1\r\n$2\r\nabcd").is_err());
        let mut ranges = Vec::new();
        assert!(parse(b"*1\r\n$9999\r\n", 100, &mut ranges).is_err());
    }

    #[test]
    fn resumes_a_request_split_across_reads() {
        let mut req = b"*1001\r\n$7\r\nBF.MADD\r\n".to_vec();
        for i in 0..1000 {
            let item = format!("item{i}");
            req.extend_from_slice(format!("${}\r\n{item}\r\n", item.len()).as_bytes());
        }
        req.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        let mut oneshot = Vec::new();
        let n = parse(&req, 1 << 20, &mut oneshot).unwrap().unwrap();
        assert_eq!(oneshot.len(), 1001);
        for step in [1usize, 7, 100, 4096] {
            let mut p = Parser::default();
            let mut end = 0;
            let got = loop {
                end = (end + step).min(req.len());
                if let Some(used) = p.parse(&req[..end], 1 << 20).unwrap() {
                    break used;
                }
            };
            assert_eq!(got, n, "step {step}");
            assert_eq!(p.args(), &oneshot[..], "step {step}");
            assert_eq!(p.parse(&req[n..], 1 << 20).unwrap(), Some(14));
            assert_eq!(p.args().len(), 1);
        }
    }

    #[test]
    fn parses_integers_like_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        for bad in [
            &b""[..],
            b"+1",
            b"01",
            b"1.5",
            b" 1",
            b"-0",
            b"1e3",
            b"0x10",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }
}
