//! The `BF.*` commands, following RedisBloom 2.4's replies, error texts and order of
//! checks (`shared/reference/redisbloom-behaviour.md`); the deliberate differences are
//! listed in `docs/bloomd.md`.

use tidemark_bloom::{Error as BloomError, ScalableBloomFilter, ScalableLayout};

use crate::resp::{Out, parse_i64};
use crate::store::{Db, Slot, Value};

/// Default error rate of filters made by `BF.ADD`, `BF.MADD` and `BF.INSERT`.
pub const DEFAULT_ERROR_RATE: f64 = 0.01;
/// Default capacity of those filters.
pub const DEFAULT_CAPACITY: u64 = 100;
/// Default expansion.
pub const DEFAULT_EXPANSION: u32 = 2;
/// Largest chunk `BF.SCANDUMP` returns (RedisBloom's limit).
pub const MAX_CHUNK_BYTES: usize = 16 * 1024 * 1024;
/// First bytes of the `BF.SCANDUMP` header chunk.
pub const DUMP_MAGIC: &[u8; 8] = b"TMBDDUMP";
/// Largest dump `BF.LOADCHUNK` accepts (the crate's own limit on a filter is lower).
const MAX_DUMP_BYTES: u64 = 1 << 40;

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(crate) const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const NOT_FOUND: &str = "ERR not found";
const FULL: &str = "ERR non scaling filter is full";
const PROBLEM: &str = "ERR problem inserting into filter";
const NO_MEMORY: &str = "ERR Insufficient memory to create filter";
const LOADING: &str = "ERR filter is being restored by BF.LOADCHUNK";

/// Writes Redis' arity error for `name` (the registered lower-case name).
pub fn arity(out: &mut Out, name: &str) {
    out.error(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ));
}

/// Parses a double like `RedisModule_StringToDouble`: no spaces, no NaN; `inf` is a number.
fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(bytes).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// Filter options of `BF.RESERVE` / `BF.INSERT`.
#[derive(Debug, Clone, Copy)]
struct Options {
    capacity: u64,
    error: f64,
    expansion: u32,
    nonscaling: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            capacity: DEFAULT_CAPACITY,
            error: DEFAULT_ERROR_RATE,
            expansion: DEFAULT_EXPANSION,
            nonscaling: false,
        }
    }
}

/// Bytes a new filter with these options needs (its first layer), or `None` when the crate
/// would refuse it as too large.
fn estimate_bytes(o: &Options, layout: ScalableLayout) -> Option<u64> {
    let layer_error = if o.nonscaling { o.error } else { o.error / 2.0 };
    let sized_for = layer_error * tidemark_bloom::LAYER_SIZING_FACTOR;
    let bytes = match layout {
        ScalableLayout::Standard => {
            tidemark_bloom::math::standard_shape(o.capacity, sized_for)
                .ok()?
                .0
                / 8
        }
        ScalableLayout::SplitBlock(_) => {
            tidemark_bloom::math::split_block_shape(o.capacity, sized_for).ok()? * 32
        }
    };
    Some(bytes + 96)
}

/// The layout a new filter with these options gets: the server's, unless that is split
/// blocks and the rate is below what eight bits per key in one block can reach within
/// 2^32 blocks (about 1e-12 per item, e.g. `BF.RESERVE k 1e-300 1`, which RedisBloom
/// accepts); such filters get standard layers, whose hash count is not fixed.
fn layout_for(db: &Db, o: &Options) -> ScalableLayout {
    match db.bloom_layout {
        ScalableLayout::SplitBlock(_) if estimate_bytes(o, db.bloom_layout).is_none() => {
            ScalableLayout::Standard
        }
        layout => layout,
    }
}

fn build(db: &Db, o: &Options) -> Result<ScalableBloomFilter, &'static str> {
    let layout = layout_for(db, o);
    let Some(need) = estimate_bytes(o, layout) else {
        return Err(NO_MEMORY);
    };
    if db.over_limit(need) {
        return Err(OOM);
    }
    let builder = ScalableBloomFilter::builder(o.capacity, o.error)
        .expansion(o.expansion)
        .nonscaling(o.nonscaling);
    match layout {
        ScalableLayout::Standard => builder,
        ScalableLayout::SplitBlock(hash) => builder.split_block(hash),
    }
    .build()
    .map_err(|_| NO_MEMORY)
}

/// Bytes the next new item may allocate: a new layer when the newest one is full.
fn growth_bytes(db: &Db, f: &ScalableBloomFilter) -> u64 {
    if db.maxmemory == 0 || f.is_nonscaling() {
        return 0;
    }
    match f.layers().last() {
        Some(l) if l.items >= l.capacity => {
            l.size_bytes.saturating_mul(u64::from(f.expansion())) * 11 / 10
        }
        _ => 0,
    }
}

/// The filter in `slot`, creating it with `create` when vacant. `Ok((filter, created))`.
fn filter_in<'a>(
    db: &Db,
    slot: &'a mut Slot,
    create: Option<&Options>,
) -> Result<(&'a mut ScalableBloomFilter, bool), &'static str> {
    let mut created = false;
    if matches!(slot, Slot::Vacant) {
        let Some(o) = create else {
            return Err(NOT_FOUND);
        };
        *slot = Slot::Live(Value::Bloom(Box::new(build(db, o)?)));
        created = true;
    }
    match slot {
        Slot::Live(Value::Bloom(f)) => Ok((f, created)),
        Slot::Live(Value::Loading { .. }) => Err(LOADING),
        Slot::Live(_) => Err(WRONGTYPE),
        Slot::Vacant | Slot::Dead => Err(NOT_FOUND),
    }
}

/// One item's outcome in ADD/MADD/INSERT.
fn add_one(db: &Db, f: &mut ScalableBloomFilter, item: &[u8]) -> Result<bool, &'static str> {
    let grow = growth_bytes(db, f);
    if grow > 0 && db.over_limit(grow) && !f.contains(item) {
        return Err(OOM);
    }
    match f.add(item) {
        Ok(added) => Ok(added),
        Err(BloomError::Full { .. }) => Err(FULL),
        Err(_) => Err(PROBLEM),
    }
}

/// Adds `items`, stopping at the first error (which ends the reply array, as RedisBloom
/// does). Logs the command when anything changed.
fn add_items(
    db: &Db,
    key: &[u8],
    items: &[&[u8]],
    create: Option<&Options>,
    args: &[&[u8]],
    out: &mut Out,
    multi: bool,
) {
    let _gate = db.gate_shared();
    let result = db.access(key, create.is_some(), true, |slot, _| {
        let (f, created) = filter_in(db, slot, create)?;
        let mut results: Vec<Result<bool, &'static str>> = Vec::with_capacity(items.len());
        let mut changed = created;
        for item in items {
            let r = add_one(db, f, item);
            changed |= matches!(r, Ok(true));
            let stop = r.is_err();
            results.push(r);
            if stop {
                break;
            }
        }
        if changed {
            db.log(args);
            db.touch();
        }
        Ok::<_, &'static str>(results)
    });
    match result {
        Err(e) => out.error(e),
        Ok(results) if !multi => match results.first() {
            Some(Ok(added)) => out.int(i64::from(*added)),
            Some(Err(e)) => out.error(e),
            None => out.int(0),
        },
        Ok(results) => {
            out.array(results.len());
            for r in results {
                match r {
                    Ok(added) => out.int(i64::from(added)),
                    Err(e) => out.error(e),
                }
            }
        }
    }
}

fn reserve(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() < 4 || args.len() > 7 {
        return arity(out, "bf.reserve");
    }
    let error = match parse_f64(args[2]) {
        None => return out.error("ERR bad error rate"),
        Some(e) if e <= 0.0 || e >= 1.0 => return out.error("ERR (0 < error rate range < 1) "),
        Some(e) => e,
    };
    let capacity = match parse_i64(args[3]) {
        None => return out.error("ERR bad capacity"),
        Some(c) if c <= 0 => return out.error("ERR (capacity should be larger than 0)"),
        Some(c) => c.unsigned_abs(),
    };
    // Keywords are searched among the options (RedisBloom also searches the key name).
    let opts = &args[4..];
    let find = |word: &str| {
        opts.iter()
            .position(|a| a.eq_ignore_ascii_case(word.as_bytes()))
    };
    let mut o = Options {
        capacity,
        error,
        ..Options::default()
    };
    let ex = find("EXPANSION");
    if let Some(i) = ex {
        let Some(v) = opts.get(i + 1) else {
            return out.error("ERR no expansion");
        };
        match parse_i64(v).and_then(|v| u32::try_from(v).ok()) {
            // RedisBloom 8: EXPANSION 0 makes a non-scaling filter.
            Some(0) => o.nonscaling = true,
            Some(v) => o.expansion = v,
            None => return out.error("ERR bad expansion"),
        }
    }
    if find("NONSCALING").is_some() {
        if ex.is_some() {
            return out.error("Nonscaling filters cannot expand");
        }
        o.nonscaling = true;
    }
    let _gate = db.gate_shared();
    let r = db.access(args[1], true, true, |slot, _| match slot {
        Slot::Vacant => {
            *slot = Slot::Live(Value::Bloom(Box::new(build(db, &o)?)));
            db.log(args);
            db.touch();
            Ok(())
        }
        Slot::Live(Value::Bloom(_) | Value::Loading { .. }) => Err("ERR item exists"),
        _ => Err(WRONGTYPE),
    });
    match r {
        Ok(()) => out.ok(),
        Err(e) => out.error(e),
    }
}

fn insert(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() < 4 {
        return arity(out, "bf.insert");
    }
    let mut o = Options::default();
    let (mut capacity, mut error, mut expansion): (i64, f64, i64) = (
        DEFAULT_CAPACITY as i64,
        DEFAULT_ERROR_RATE,
        i64::from(DEFAULT_EXPANSION),
    );
    let mut nocreate = false;
    let mut items_at = None;
    let mut i = 2;
    while i < args.len() {
        let w = args[i];
        let is = |k: &str| w.eq_ignore_ascii_case(k.as_bytes());
        if is("ITEMS") {
            items_at = Some(i + 1);
            break;
        } else if is("NOCREATE") {
            nocreate = true;
            i += 1;
        } else if is("NONSCALING") {
            o.nonscaling = true;
            i += 1;
        } else if is("CAPACITY") || is("ERROR") || is("EXPANSION") {
            let Some(v) = args.get(i + 1) else {
                return arity(out, "bf.insert");
            };
            if is("CAPACITY") {
                match parse_i64(v) {
                    Some(c) => capacity = c,
                    None => return out.error("Bad capacity"),
                }
            } else if is("ERROR") {
                match parse_f64(v) {
                    Some(e) => error = e,
                    None => return out.error("Bad error rate"),
                }
            } else {
                match parse_i64(v) {
                    Some(x) => expansion = x,
                    None => return out.error("Bad expansion"),
                }
            }
            i += 2;
        } else {
            return out.error("Unknown argument received");
        }
    }
    let items_at = match items_at {
        Some(at) if at < args.len() => at,
        _ => return arity(out, "bf.insert"),
    };
    if error <= 0.0 || error >= 1.0 || capacity < 1 || expansion < 1 {
        return out.error("Bad argument received");
    }
    o.capacity = capacity.unsigned_abs();
    o.error = error;
    o.expansion = match u32::try_from(expansion) {
        Ok(x) => x,
        Err(_) => return out.error("Bad expansion"),
    };
    let create = (!nocreate).then_some(&o);
    add_items(db, args[1], &args[items_at..], create, args, out, true);
}

fn exists(db: &Db, key: &[u8], items: &[&[u8]], out: &mut Out, multi: bool) {
    let mut answers = [false; 1];
    let mut many = Vec::new();
    db.access(key, false, false, |slot, _| {
        if let Slot::Live(Value::Bloom(f)) = slot {
            if multi {
                many = items.iter().map(|i| f.contains(i)).collect();
            } else if let Some(item) = items.first() {
                answers[0] = f.contains(item);
            }
        }
    });
    if multi {
        many.resize(items.len(), false);
        out.array(items.len());
        for a in many {
            out.int(i64::from(a));
        }
    } else {
        out.int(i64::from(answers[0]));
    }
}

/// Reads the filter at `key` with `f`; `Err` carries `ERR not found` or `WRONGTYPE`.
fn read<R>(
    db: &Db,
    key: &[u8],
    missing_ok: bool,
    f: impl FnOnce(Option<&ScalableBloomFilter>) -> R,
) -> Result<R, &'static str> {
    db.access(key, false, false, |slot, _| match slot {
        Slot::Live(Value::Bloom(filter)) => Ok(f(Some(filter))),
        Slot::Live(Value::Loading { .. }) => Err(LOADING),
        Slot::Live(_) => Err(WRONGTYPE),
        _ if missing_ok => Ok(f(None)),
        _ => Err(NOT_FOUND),
    })
}

/// The `Size` figure of `BF.INFO`: RedisBloom's accounting (32 bytes for the chain, 64 per
/// layer) over our bit arrays.
pub fn info_size(f: &ScalableBloomFilter) -> u64 {
    32 + 64 * f.num_layers() as u64 + f.size_bytes()
}

fn info(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() < 2 || args.len() > 3 {
        return arity(out, "bf.info");
    }
    let r = read(db, args[1], false, |f| {
        f.map(|f| {
            (
                f.capacity(),
                info_size(f),
                f.num_layers() as u64,
                f.len(),
                (!f.is_nonscaling()).then_some(f.expansion()),
            )
        })
    });
    let (capacity, size, filters, items, expansion) = match r {
        Ok(Some(v)) => v,
        Ok(None) => return out.error(NOT_FOUND),
        Err(e) => return out.error(e),
    };
    let exp = |out: &mut Out| match expansion {
        Some(x) => out.int(i64::from(x)),
        None => out.null(),
    };
    let Some(field) = args.get(2) else {
        out.array(10);
        out.simple("Capacity");
        out.uint(capacity);
        out.simple("Size");
        out.uint(size);
        out.simple("Number of filters");
        out.uint(filters);
        out.simple("Number of items inserted");
        out.uint(items);
        out.simple("Expansion rate");
        exp(out);
        return;
    };
    let value = match field.to_ascii_uppercase().as_slice() {
        b"CAPACITY" => capacity,
        b"SIZE" => size,
        b"FILTERS" => filters,
        b"ITEMS" => items,
        b"EXPANSION" => {
            out.array(1);
            return exp(out);
        }
        _ => return out.error("Invalid information value"),
    };
    out.array(1);
    out.uint(value);
}

/// C's `%g`: six significant digits, trailing zeros dropped, exponent form below 1e-4 or
/// from 1e6.
pub fn format_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.unsigned_abs())
    } else {
        let decimals = usize::try_from(5 - exp).unwrap_or(0);
        trim(&format!("{v:.decimals$}"))
    }
}

fn debug(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() != 2 {
        return arity(out, "bf.debug");
    }
    let r = read(db, args[1], false, |f| {
        f.map(|f| {
            let mut lines = vec![format!("size:{}", f.len())];
            for l in f.layers() {
                lines.push(format!(
                    "bytes:{} bits:{} hashes:{} hashwidth:64 capacity:{} size:{} ratio:{}",
                    l.size_bytes,
                    l.num_bits,
                    l.num_hashes,
                    l.capacity,
                    l.items,
                    format_g(l.error_rate)
                ));
            }
            lines
        })
    });
    match r {
        Ok(Some(lines)) => {
            out.array(lines.len());
            for l in lines {
                out.bulk(l.as_bytes());
            }
        }
        Ok(None) => out.error(NOT_FOUND),
        Err(e) => out.error(e),
    }
}

fn card(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() != 2 {
        return arity(out, "bf.card");
    }
    match read(db, args[1], true, |f| f.map_or(0, ScalableBloomFilter::len)) {
        Ok(n) => out.uint(n),
        Err(e) => out.error(e),
    }
}

fn scandump(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() != 3 {
        return arity(out, "bf.scandump");
    }
    // The key is looked up before the iterator is parsed, as in RedisBloom.
    let iter = parse_i64(args[2]);
    let r = read(db, args[1], false, |f| {
        let f = f?;
        let iter = iter?;
        let bytes = f.to_bytes();
        Some(if iter == 0 {
            let mut header = DUMP_MAGIC.to_vec();
            header.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            (1, header)
        } else {
            let start = usize::try_from(iter - 1).unwrap_or(usize::MAX);
            if iter < 0 || start >= bytes.len() {
                (0, Vec::new())
            } else {
                let end = bytes.len().min(start + MAX_CHUNK_BYTES);
                (iter + (end - start) as i64, bytes[start..end].to_vec())
            }
        })
    });
    match r {
        Ok(Some((next, chunk))) => {
            out.array(2);
            out.int(next);
            out.bulk(&chunk);
        }
        Ok(None) => out.error("Second argument must be numeric"),
        Err(e) => out.error(e),
    }
}

fn loadchunk(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() != 4 {
        return arity(out, "bf.loadchunk");
    }
    let Some(iter) = parse_i64(args[2]) else {
        return out.error("ERR Second argument must be numeric");
    };
    let data = args[3];
    let _gate = db.gate_shared();
    let r = db.access(args[1], true, true, |slot, _| {
        match slot {
            Slot::Vacant => {
                if iter != 1 {
                    return Err(NOT_FOUND);
                }
                let total = (data.len() == 16 && data.starts_with(DUMP_MAGIC))
                    .then(|| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&data[8..16]);
                        u64::from_le_bytes(b)
                    })
                    .filter(|&t| t > 0 && t <= MAX_DUMP_BYTES)
                    .ok_or("ERR received bad data")?;
                if db.over_limit(total) {
                    return Err(OOM);
                }
                *slot = Slot::Live(Value::Loading {
                    bytes: Vec::new(),
                    total,
                });
            }
            Slot::Live(Value::Loading { bytes, total }) => {
                let len = data.len() as i64;
                if iter <= 0 || iter - 1 < len {
                    return Err("ERR received bad data");
                }
                let offset = (iter - 1 - len).unsigned_abs();
                if offset != bytes.len() as u64 {
                    return Err("ERR invalid offset - no link found");
                }
                if offset + data.len() as u64 > *total {
                    return Err("ERR invalid chunk - Too big for current filter");
                }
                if db.over_limit(data.len() as u64) {
                    return Err(OOM);
                }
                bytes.extend_from_slice(data);
                if bytes.len() as u64 == *total {
                    match ScalableBloomFilter::from_bytes(bytes) {
                        Ok(f) => *slot = Slot::Live(Value::Bloom(Box::new(f))),
                        Err(_) => {
                            // The key goes away with the bad dump.
                            *slot = Slot::Vacant;
                            db.log(&[b"DEL", args[1]]);
                            return Err("ERR received bad data");
                        }
                    }
                }
            }
            Slot::Live(Value::Bloom(_)) => return Err("ERR received bad data"),
            Slot::Live(_) => return Err(WRONGTYPE),
            Slot::Dead => return Err(NOT_FOUND),
        }
        db.log(args);
        db.touch();
        Ok(())
    });
    match r {
        Ok(()) => out.ok(),
        Err(e) => out.error(e),
    }
}

fn merge(db: &Db, args: &[&[u8]], out: &mut Out) {
    if args.len() < 3 {
        return arity(out, "bf.merge");
    }
    if db.over_limit(0) {
        return out.error(OOM);
    }
    let _gate = db.gate_exclusive();
    let mut acc: Option<ScalableBloomFilter> = None;
    for src in &args[2..] {
        let r = read(db, src, false, |f| match (f, acc.as_mut()) {
            (Some(f), None) => {
                acc = Some(f.clone());
                Ok(())
            }
            (Some(f), Some(a)) => a.union(f).map_err(|e| format!("ERR {e}")),
            (None, _) => Err(NOT_FOUND.to_string()),
        });
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return out.error(&e),
            Err(e) => return out.error(e),
        }
    }
    let Some(acc) = acc else {
        return out.error(NOT_FOUND);
    };
    let r = db.access(args[1], true, true, |slot, _| {
        match slot {
            Slot::Vacant => {
                if db.over_limit(info_size(&acc)) {
                    return Err(OOM.to_string());
                }
                *slot = Slot::Live(Value::Bloom(Box::new(acc)));
            }
            Slot::Live(Value::Bloom(d)) => d.union(&acc).map_err(|e| format!("ERR {e}"))?,
            Slot::Live(Value::Loading { .. }) => return Err(LOADING.to_string()),
            _ => return Err(WRONGTYPE.to_string()),
        }
        db.log(args);
        db.touch();
        Ok(())
    });
    match r {
        Ok(()) => out.ok(),
        Err(e) => out.error(&e),
    }
}

/// Runs a `BF.*` command whose lower-cased name is `name`; false when there is no such
/// command.
pub fn dispatch(db: &Db, name: &[u8], args: &[&[u8]], out: &mut Out) -> bool {
    let over = |out: &mut Out| {
        let full = db.over_limit(0);
        if full {
            out.error(OOM);
        }
        full
    };
    match name {
        b"bf.reserve" => {
            if !over(out) {
                reserve(db, args, out)
            }
        }
        b"bf.add" => {
            if args.len() != 3 {
                arity(out, "bf.add")
            } else if !over(out) {
                add_items(
                    db,
                    args[1],
                    &args[2..],
                    Some(&Options::default()),
                    args,
                    out,
                    false,
                )
            }
        }
        b"bf.madd" => {
            if args.len() < 3 {
                arity(out, "bf.madd")
            } else if !over(out) {
                add_items(
                    db,
                    args[1],
                    &args[2..],
                    Some(&Options::default()),
                    args,
                    out,
                    true,
                )
            }
        }
        b"bf.insert" => {
            if !over(out) {
                insert(db, args, out)
            }
        }
        b"bf.exists" => {
            if args.len() != 3 {
                arity(out, "bf.exists")
            } else {
                exists(db, args[1], &args[2..], out, false)
            }
        }
        b"bf.mexists" => {
            if args.len() < 3 {
                arity(out, "bf.mexists")
            } else {
                exists(db, args[1], &args[2..], out, true)
            }
        }
        b"bf.info" => info(db, args, out),
        b"bf.card" => card(db, args, out),
        b"bf.debug" => debug(db, args, out),
        b"bf.scandump" => scandump(db, args, out),
        b"bf.loadchunk" => {
            if !over(out) {
                loadchunk(db, args, out)
            }
        }
        b"bf.merge" => merge(db, args, out),
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_printf_g() {
        assert_eq!(format_g(0.005), "0.005");
        assert_eq!(format_g(6.25e-05), "6.25e-05");
        assert_eq!(format_g(0.0025), "0.0025");
        assert_eq!(format_g(0.01), "0.01");
        assert_eq!(format_g(1.0 / 3.0), "0.333333");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
    }

    #[test]
    fn parses_doubles_like_redis() {
        assert_eq!(parse_f64(b"0.01"), Some(0.01));
        assert_eq!(parse_f64(b".5"), Some(0.5));
        assert_eq!(parse_f64(b"1e-300"), Some(1e-300));
        assert_eq!(parse_f64(b"inf"), Some(f64::INFINITY));
        for bad in [&b""[..], b"abc", b"nan", b"0.01x", b" 1"] {
            assert_eq!(parse_f64(bad), None);
        }
    }
}
