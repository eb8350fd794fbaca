//! The fast path of [`DocParser::parse_line`](crate::DocParser::parse_line): a
//! hand-written scanner for the documents shippers send (an object of objects, keys and
//! strings without escapes, plain numbers), walking the mapping's path tree as it reads.
//!
//! It decides nothing the serde path would decide otherwise: on anything it does not
//! handle plainly — an escape, a control character, an array or object where a value is
//! mapped, a field given twice, an undeclared field under `"dynamic": "strict"`, a
//! number it cannot convert exactly as serde_json does, deep nesting, malformed JSON — it
//! returns `None` and the caller parses the line again through serde_json, which gives
//! the result or the error. What it accepts it fills exactly as that path would (tested
//! side by side on generated and hand-made documents).

use std::borrow::Cow;

use crate::doc::Scalar;
use crate::mapping::{Dynamic, Mapping};

/// Nesting the fast path follows (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 32;

/// Keys per object the fast path checks for repeats; an object with more goes to the
/// serde path, which checks any number (a line of many keys cannot make the linear
/// check quadratic).
const MAX_KEYS: usize = 64;

/// Powers of ten exactly representable as `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// What a parser keeps between lines (no allocation per line): the key ranges of the
/// objects being read, to see a key given twice, and the shape of the last document
/// read whole.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScanScratch {
    keys: Vec<(usize, usize)>,
    shape: Shape,
    /// The mapped values of the document being read whole: `(start, end, field)`.
    values: Vec<(usize, usize, u32)>,
}

/// The skeleton of the last document the scanner read whole and could learn from (every
/// leaf a mapped scalar): its bytes outside the values, and the field of each value.
///
/// Shippers send documents of one shape, line after line; a line whose bytes outside
/// its values equal the skeleton has the same keys in the same places, so it maps to the
/// same fields, has no key twice, and nests no deeper, and only its values need reading
/// (with the same value reader). Any byte of difference, or a value that does not read
/// as a scalar, and the line is read whole (and its shape learnt).
#[derive(Debug, Clone, Default)]
struct Shape {
    /// The literal pieces, one after the other.
    text: Vec<u8>,
    /// Per value, in order: where the literal before it ends in `text`, and its field.
    slots: Vec<(usize, u32)>,
    /// Whether `text` and `slots` hold a shape.
    known: bool,
}

impl Shape {
    /// Reads `line` as this shape into `found`; `None` when it is not of this shape
    /// (`found` may then hold some of its values: the caller clears it).
    fn read<'a>(&self, line: &'a str, found: &mut [Option<Scalar<'a>>]) -> Option<()> {
        let mut s = Scanner {
            b: line.as_bytes(),
            text: line,
            at: 0,
            keys: Vec::new(),
            values: None,
        };
        let mut from = 0;
        for &(to, field) in &self.slots {
            let literal = self.text.get(from..to)?;
            if s.b.get(s.at..s.at + literal.len())? != literal {
                return None;
            }
            s.at += literal.len();
            from = to;
            if let Some(v) = s.scalar()? {
                let slot = found.get_mut(field as usize)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(v);
            }
        }
        (s.b.get(s.at..)? == self.text.get(from..)?).then_some(())
    }

    /// Learns the shape of `line`, read whole with its mapped values at `values`.
    fn learn(&mut self, line: &[u8], values: &[(usize, usize, u32)]) {
        self.text.clear();
        self.slots.clear();
        let mut from = 0;
        for &(start, end, field) in values {
            let Some(literal) = line.get(from..start) else {
                self.known = false;
                return;
            };
            self.text.extend_from_slice(literal);
            self.slots.push((self.text.len(), field));
            from = end;
        }
        self.text
            .extend_from_slice(line.get(from..).unwrap_or_default());
        self.known = true;
    }
}

/// Scans `line` into `found` (by field index) and `ignored`; `None`: use the serde path.
/// A line of the shape of the last one read whole takes the skeleton's shortcut (see
/// [`Shape`]).
pub(crate) fn scan_doc<'a>(
    mapping: &Mapping,
    line: &'a str,
    found: &mut [Option<Scalar<'a>>],
    ignored: &mut u64,
    scratch: &mut ScanScratch,
) -> Option<()> {
    if scratch.shape.known {
        if scratch.shape.read(line, found).is_some() {
            return Some(());
        }
        found.iter_mut().for_each(|f| *f = None);
    }
    scratch.keys.clear();
    scratch.values.clear();
    let mut s = Scanner {
        b: line.as_bytes(),
        text: line,
        at: 0,
        keys: std::mem::take(&mut scratch.keys),
        values: Some(std::mem::take(&mut scratch.values)),
    };
    let done = s.document(mapping, found, ignored);
    scratch.keys = s.keys;
    match s.values {
        // Every leaf was a mapped value: the shape is learnt.
        Some(values) => {
            if done.is_some() {
                scratch.shape.learn(line.as_bytes(), &values);
            }
            scratch.values = values;
        }
        None => scratch.shape.known = false,
    }
    done
}

/// The offset of the first `"`, `\\` or control character in `b`, eight bytes at a
/// time (the bit tricks flag a byte exactly at the lowest match of each kind).
fn stop_byte(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut chunks = b.chunks_exact(8);
    let mut at = 0;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        let hit = zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if hit != 0 {
            return Some(at + (hit.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|i| at + i)
}

struct Scanner<'a> {
    b: &'a [u8],
    text: &'a str,
    at: usize,
    /// `(start, len)` of each key of the objects open, outermost first.
    keys: Vec<(usize, usize)>,
    /// The mapped values read, `(start, end, field)`, while the document can still give
    /// its shape; `None` once a leaf was not a mapped value.
    values: Option<Vec<(usize, usize, u32)>>,
}

impl<'a> Scanner<'a> {
    fn document(
        &mut self,
        mapping: &Mapping,
        found: &mut [Option<Scalar<'a>>],
        ignored: &mut u64,
    ) -> Option<()> {
        self.ws();
        if self.peek()? != b'{' {
            return None;
        }
        self.at += 1;
        self.object(mapping, 0, found, ignored, 1)?;
        self.ws();
        (self.at == self.b.len()).then_some(())
    }

    /// Reads a key whose `"` was read, and records it among the keys of the object whose
    /// keys start at `mark`: `None` when that object has it already (the serde path
    /// refuses the document) or has more than [`MAX_KEYS`] keys.
    fn key(&mut self, mark: usize) -> Option<&'a str> {
        let start = self.at;
        let key = self.string()?;
        let earlier = self.keys.get(mark..)?;
        if earlier.len() >= MAX_KEYS
            || earlier
                .iter()
                .any(|&(s, l)| l == key.len() && self.b.get(s..s + l) == Some(key.as_bytes()))
        {
            return None;
        }
        self.keys.push((start, key.len()));
        Some(key)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        if self.peek()? == c {
            self.at += 1;
            Some(())
        } else {
            None
        }
    }

    /// The members of an object whose `{` was read, at mapping `node`.
    fn object(
        &mut self,
        mapping: &Mapping,
        node: usize,
        found: &mut [Option<Scalar<'a>>],
        ignored: &mut u64,
        depth: u32,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        let mark = self.keys.len();
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return None;
            }
            self.at += 1;
            let key = self.key(mark)?;
            self.eat(b':')?;
            self.ws();
            match mapping.child(node, key) {
                None => {
                    // An unmapped subtree: the shape would not say how to read it.
                    self.values = None;
                    let leaves = self.skip(depth)?;
                    if leaves > 0 {
                        match mapping.dynamic() {
                            Dynamic::Strict => return None,
                            Dynamic::Ignore => *ignored += leaves,
                        }
                    }
                }
                Some(child) => match mapping.node_field(child) {
                    Some(i) => {
                        let start = self.at;
                        let value = self.scalar()?;
                        if let Some(values) = &mut self.values {
                            values.push((start, self.at, i as u32));
                        }
                        if let Some(v) = value
                            && let Some(slot) = found.get_mut(i)
                        {
                            if slot.is_some() {
                                return None;
                            }
                            *slot = Some(v);
                        }
                    }
                    None => {
                        if self.peek()? != b'{' {
                            return None;
                        }
                        self.at += 1;
                        self.object(mapping, child, found, ignored, depth + 1)?;
                    }
                },
            }
            self.ws();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    self.keys.truncate(mark);
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The rest of a string whose `"` was read: borrowed, as it holds no escape and no
    /// control character.
    fn string(&mut self) -> Option<&'a str> {
        let start = self.at;
        let end = start + stop_byte(self.b.get(start..)?)?;
        if self.b.get(end) != Some(&b'"') {
            return None;
        }
        let s = self.text.get(start..end)?;
        self.at = end + 1;
        Some(s)
    }

    /// A mapped field's value: `Some(None)` for `null`.
    fn scalar(&mut self) -> Option<Option<Scalar<'a>>> {
        Some(Some(match self.peek()? {
            b'"' => {
                self.at += 1;
                Scalar::Str(Cow::Borrowed(self.string()?))
            }
            b't' => {
                self.literal(b"true")?;
                Scalar::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Scalar::Bool(false)
            }
            b'n' => {
                self.literal(b"null")?;
                return Some(None);
            }
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }))
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        if self.b.get(self.at..end)? == word {
            self.at = end;
            Some(())
        } else {
            None
        }
    }

    /// A number, as serde_json reads it: an integer without fraction or exponent is a
    /// `u64` (an `i64` when negative), anything else an `f64`. Only what converts
    /// exactly as serde_json converts it is taken here (at most 18 digits, a decimal
    /// exponent within ±22, so the result is serde_json's single multiply or divide).
    fn number(&mut self) -> Option<Scalar<'a>> {
        let negative = self.peek()? == b'-';
        if negative {
            self.at += 1;
        }
        let mut sig: u64 = 0;
        let mut digits = 0u32;
        match self.peek()? {
            b'0' => {
                self.at += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return None;
                }
                digits = 1;
            }
            b'1'..=b'9' => {
                while let Some(c @ b'0'..=b'9') = self.peek() {
                    sig = sig * 10 + u64::from(c - b'0');
                    digits += 1;
                    if digits > 18 {
                        return None;
                    }
                    self.at += 1;
                }
            }
            _ => return None,
        }
        let mut exp: i32 = 0;
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.at += 1;
            float = true;
            let before = digits;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                sig = sig * 10 + u64::from(c - b'0');
                digits += 1;
                exp -= 1;
                if digits > 18 {
                    return None;
                }
                self.at += 1;
            }
            if digits == before {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            float = true;
            let negative_exp = match self.peek()? {
                b'+' => {
                    self.at += 1;
                    false
                }
                b'-' => {
                    self.at += 1;
                    true
                }
                _ => false,
            };
            let mut e: i32 = 0;
            let mut any = false;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                e = e * 10 + i32::from(c - b'0');
                any = true;
                if e > 400 {
                    return None;
                }
                self.at += 1;
            }
            if !any {
                return None;
            }
            exp += if negative_exp { -e } else { e };
        }
        if !float {
            return Some(if negative {
                // serde_json reads `-0` as a float, and -2^63 needs care: leave both.
                if sig == 0 {
                    return None;
                }
                Scalar::I64(-i64::try_from(sig).ok()?)
            } else {
                match i64::try_from(sig) {
                    Ok(i) => Scalar::I64(i),
                    Err(_) => Scalar::U64(sig),
                }
            });
        }
        let pow = *POW10.get(exp.unsigned_abs() as usize)?;
        let mut f = sig as f64;
        if exp >= 0 {
            f *= pow;
        } else {
            f /= pow;
        }
        Some(Scalar::F64(if negative { -f } else { f }))
    }

    /// Skips any value, counting its leaves as the serde path does: `null` 0, a scalar
    /// or an array 1, an object the sum of its values'.
    fn skip(&mut self, depth: u32) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => {
                self.at += 1;
                let mut leaves = 0;
                self.ws();
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Some(0);
                }
                let mark = self.keys.len();
                loop {
                    self.ws();
                    if self.peek()? != b'"' {
                        return None;
                    }
                    self.at += 1;
                    self.key(mark)?;
                    self.eat(b':')?;
                    self.ws();
                    leaves += self.skip(depth + 1)?;
                    self.ws();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            self.keys.truncate(mark);
                            return Some(leaves);
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(1);
                }
                loop {
                    self.ws();
                    self.skip(depth + 1)?;
                    self.ws();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(1);
                        }
                        _ => return None,
                    }
                }
            }
            _ => Some(u64::from(self.scalar()?.is_some())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tidemark_datagen::{Dataset, Options};

    use crate::{DocParser, Mapping};

    fn mapping(name: &str) -> Mapping {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/tidemark")
            .join(name);
        Mapping::from_json_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The fast path's answer (through `parse_line`) against serde_json's alone: the
    /// same document, or the same error text. Returns whether the fast path took it.
    fn same(parser: &mut DocParser, line: &str) -> bool {
        let n = parser.mapping().fields().len();
        let mut found = vec![None; n];
        let mut ignored = 0;
        let fast = super::scan_doc(
            parser.mapping(),
            line,
            &mut found,
            &mut ignored,
            &mut super::ScanScratch::default(),
        )
        .is_some();
        let got = parser.parse_line(line).map_err(|e| e.to_string());
        let want = parser
            .parse_line_serde(line, vec![None; n], 0)
            .map_err(|e| e.to_string());
        assert_eq!(got, want, "{line}");
        fast
    }

    /// A small deterministic generator (splitmix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn generated_documents_take_the_fast_path_and_parse_as_serde_does() {
        let mut parser = DocParser::new(mapping("k8s-datagen.mapping.json").into()).unwrap();
        let mut fast = 0;
        let lines: Vec<String> = Dataset::k8s(Options::default().points(2_000))
            .ndjson()
            .collect();
        for line in &lines {
            fast += usize::from(same(&mut parser, line));
        }
        assert_eq!(fast, lines.len(), "every generated document is plain");
    }

    #[test]
    fn a_document_of_the_last_shape_is_read_by_its_skeleton() {
        let m = mapping("k8s-datagen.mapping.json");
        let lines: Vec<String> = Dataset::k8s(Options::default().points(4))
            .ndjson()
            .collect();
        let mut scratch = super::ScanScratch::default();
        let mut found = vec![None; m.fields().len()];
        let mut ignored = 0;
        super::scan_doc(&m, &lines[0], &mut found, &mut ignored, &mut scratch).unwrap();
        assert!(scratch.shape.known);
        assert_eq!(scratch.shape.slots.len(), found.iter().flatten().count());
        // Another document of the same shape reads through the skeleton alone, to the
        // values a whole read gives.
        let mut by_shape = vec![None; m.fields().len()];
        scratch.shape.read(&lines[1], &mut by_shape).unwrap();
        let mut whole = vec![None; m.fields().len()];
        super::scan_doc(
            &m,
            &lines[1],
            &mut whole,
            &mut ignored,
            &mut super::ScanScratch::default(),
        )
        .unwrap();
        assert_eq!(by_shape, whole);
        // One space more, a value of another kind, a key renamed: not of the shape.
        let spaced = lines[1].replacen(':', ": ", 1);
        let mut f = vec![None; m.fields().len()];
        assert!(scratch.shape.read(&spaced, &mut f).is_none());
        let renamed = lines[1].replacen("\"name\"", "\"nome\"", 1);
        assert!(scratch.shape.read(&renamed, &mut f).is_none());
        let at = lines[1].find("\"@timestamp\":").unwrap() + "\"@timestamp\":".len();
        let end = at + lines[1][at..].find(',').unwrap();
        let object = format!("{}{{}}{}", &lines[1][..at], &lines[1][end..]);
        let mut f = vec![None; m.fields().len()];
        assert!(scratch.shape.read(&object, &mut f).is_none());
        let text = format!("{}\"1000\"{}", &lines[1][..at], &lines[1][end..]);
        let mut f = vec![None; m.fields().len()];
        scratch.shape.read(&text, &mut f).unwrap();
        // A document with an unmapped leaf teaches no shape.
        let mut loose = super::ScanScratch::default();
        let extra = lines[0].replacen('{', "{\"zz\":1,", 1);
        let _ = super::scan_doc(&m, &extra, &mut found, &mut ignored, &mut loose);
        assert!(!loose.shape.known);
    }

    #[test]
    fn mutated_documents_parse_as_serde_does() {
        let mut parser = DocParser::new(mapping("k8s-datagen.mapping.json").into()).unwrap();
        let lines: Vec<String> = Dataset::k8s(Options::default().points(300))
            .ndjson()
            .collect();
        let alphabet = b"{}[]\",:.-+eE0123456789 \\tnulfasrx\x01";
        let mut rng = Rng(7);
        let mut fast = 0;
        let mut tried = 0;
        for line in &lines {
            for _ in 0..60 {
                let mut b = line.as_bytes().to_vec();
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(b.len());
                    let c = alphabet[rng.below(alphabet.len())];
                    match rng.below(3) {
                        0 => b[at] = c,
                        1 => b.insert(at, c),
                        _ => {
                            b.remove(at);
                        }
                    }
                }
                let Ok(text) = String::from_utf8(b) else {
                    continue;
                };
                tried += 1;
                fast += usize::from(same(&mut parser, &text));
            }
        }
        // Most mutations break the document or its mapping; some keep it valid.
        assert!(tried > 10_000 && fast > 100, "{tried} tried, {fast} fast");
    }

    #[test]
    fn edge_cases_parse_as_serde_does() {
        let mut strict = DocParser::new(mapping("k8s.mapping.json").into()).unwrap();
        let mapping_text = r#"{"mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "host": {"properties": {"name": {"type": "keyword", "time_series_dimension": true}}},
            "n": {"type": "long", "time_series_metric": "gauge"},
            "u": {"type": "unsigned_long", "time_series_metric": "counter"},
            "x": {"type": "double", "time_series_metric": "gauge"},
            "tag": {"type": "keyword"},
            "ok": {"type": "boolean"}}}}"#;
        let mut loose =
            DocParser::new(Mapping::from_json_str(mapping_text).unwrap().into()).unwrap();
        let numbers = [
            "0",
            "-0",
            "1",
            "-1",
            "1.0",
            "-1.5",
            "0.1",
            "1e5",
            "1E-5",
            "-1.5e+3",
            "2.5e22",
            "2.5e23",
            "2.5e-22",
            "2.5e-23",
            "123456789012345678",
            "1234567890123456789",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "1.",
            ".5",
            "01",
            "-01",
            "1e",
            "1e+",
            "1e400",
            "1e-400",
            "0.000000000000000000001",
            "3.14159265358979323846",
            "1.7976931348623157e308",
            "-",
            "+1",
            "0x10",
            "1_000",
            "NaN",
            "Infinity",
            "1.5.2",
        ];
        let mut cases: Vec<String> = Vec::new();
        for n in numbers {
            for field in ["n", "u", "x", "tag", "@timestamp", "zz"] {
                cases.push(format!(
                    r#"{{"@timestamp": 1000, "host": {{"name": "a"}}, "{field}": {n}}}"#
                ));
            }
        }
        for extra in [
            r#""tag": "a\"b""#,
            r#""tag": "a\u0041""#,
            r#""t\u0061g": "x""#,
            r#""tag": ["a"]"#,
            r#""tag": {"a": 1}"#,
            r#""tag": null"#,
            r#""ok": true"#,
            r#""ok": tru"#,
            r#""ok": nulll"#,
            r#""zz": [1, [2, {"a": [3]}], null, "s"]"#,
            r#""zz": {"a": {"b": null}, "c": []}"#,
            r#""zz": {}"#,
            r#""zz": [,]"#,
            r#""zz": [1,]"#,
            r#""zz": {"a": 1,}"#,
            r#""host.name": "b""#,
            r#""host": {"name": "c"}"#,
            r#""host": "flat""#,
            r#""host": null"#,
            r#""host": {}"#,
            r#""x": 1, "x": 2"#,
            r#""zz": 1, "zz": 2"#,
            r#""zz": {"a": 1, "b": {"c": 1, "c": null}}"#,
            r#""zz": [{"a": 1, "a": 1}]"#,
            "\"tag\": \"tab\there\"",
        ] {
            cases.push(format!(
                r#"{{"@timestamp": "2025-01-01T00:00:00Z", "host": {{"name": "a"}}, {extra}}}"#
            ));
        }
        cases.extend(
            [
                "",
                "   ",
                "[]",
                "null",
                "{}",
                "{",
                r#"{"@timestamp": 1, "host": {"name": "a"}} x"#,
                r#"{"@timestamp": 1, "host": {"name": "a"}}   "#,
                "\t{ \"@timestamp\" :1 ,\"host\" :{ \"name\":\"a\" } }\r",
                r#"{"@timestamp": 1, "host": {"name": "a"},}"#,
                r#"{"@timestamp": 1 "host": {"name": "a"}}"#,
                r#"{"host": {"name": "a"}}"#,
                r#"{"@timestamp": 1}"#,
            ]
            .map(str::to_owned),
        );
        let deep = format!("{}1{}", r#"{"zz":"#.repeat(40), "}".repeat(40));
        cases.push(format!(
            r#"{{"@timestamp": 1, "host": {{"name": "a"}}, "zz": {}}}"#,
            deep.trim_start_matches('{').trim_end_matches('}')
        ));
        let mut fast = 0;
        for c in &cases {
            fast += usize::from(same(&mut loose, c));
            same(&mut strict, c);
        }
        assert!(fast > 50, "{fast} of {} took the fast path", cases.len());
    }
}

#[cfg(test)]
mod stop_tests {
    #[test]
    fn stop_byte_finds_the_first_quote_backslash_or_control_character() {
        for len in 0..40 {
            for at in 0..len {
                for c in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                    let mut b = vec![b'a'; len];
                    // Bytes that must not stop it: high bytes, 0x20, '#', ']'.
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = [b'a', 0xc3, 0x20, b'#', b']', 0x80, 0xff][i % 7];
                    }
                    b[at] = c;
                    if at + 1 < len {
                        b[at + 1] = b'"';
                    }
                    assert_eq!(super::stop_byte(&b), Some(at), "{len} {at} {c}");
                }
            }
            let b: Vec<u8> = (0..len).map(|i| [b'a', 0xc3, 0x20, 0x7f][i % 4]).collect();
            assert_eq!(super::stop_byte(&b), None);
        }
    }
}
