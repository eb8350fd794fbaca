//! Server configuration: defaults, a small Redis-style config file, and value parsing.

use std::path::PathBuf;
use std::time::Duration;
use tidemark_bloom::{Hash64, ScalableLayout, Seed};

use crate::error::{Error, Result};

/// When the append-only log is flushed to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFsync {
    /// `fsync` before each reply that follows a write.
    Always,
    /// `fsync` once a second (Redis' default); at most a second of writes is lost on a crash.
    Everysec,
    /// Leave it to the operating system.
    No,
}

/// Everything the server needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind (`127.0.0.1` by default).
    pub bind: String,
    /// TCP port; 0 picks a free one (the chosen port is printed and written to `port_file`).
    pub port: u16,
    /// Directory of the snapshot and the append-only log.
    pub dir: PathBuf,
    /// Snapshot file name inside `dir`.
    pub dbfilename: String,
    /// Append-only log file name inside `dir`.
    pub appendfilename: String,
    /// Save points `(seconds, changes)`: snapshot when at least `changes` writes happened and
    /// `seconds` passed since the last save. Empty disables interval and shutdown saves.
    pub save: Vec<(u64, u64)>,
    /// Log every write to the append-only file.
    pub appendonly: bool,
    /// Flush policy of the append-only log.
    pub appendfsync: AppendFsync,
    /// Password clients must give with `AUTH` (none by default).
    pub requirepass: Option<String>,
    /// Memory limit in bytes for the stored values; 0 means none. Writes past it answer
    /// `-OOM ...`.
    pub maxmemory: u64,
    /// Largest accepted bulk string (an item, a key, a chunk), in bytes.
    pub max_request_bytes: usize,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// File to write the bound port to once listening (for tests and scripts).
    pub port_file: Option<PathBuf>,
    /// Layout and hash of the filters this server creates (`bloom-hash`). Filters loaded
    /// from a snapshot or a log keep the layout they were written with.
    pub bloom_layout: ScalableLayout,
}

/// The default `bloom-hash`: split-block layers hashed with SipHash-1-3-64 under the
/// `bloom-hash-key` (by default the documented [`Seed::DEFAULT`]).
///
/// Items come from network clients, who may choose them to collide: with an unkeyed hash
/// (XXH3) a client that can write to a filter shared with others can compute items that
/// set exactly the bits of another client's item, so that `BF.EXISTS` (a dedup check)
/// answers 1 for an item nobody added. A keyed hash with a secret `bloom-hash-key`
/// prevents that. It costs little here: hashing a 12-byte item with SipHash takes about
/// 10 ns more than XXH3, against roughly 700 ns of request handling per command
/// (`docs/results/bloomd.md` measures both). Set `bloom-hash xxh3` when every client is
/// trusted.
pub const DEFAULT_BLOOM_LAYOUT: ScalableLayout =
    ScalableLayout::SplitBlock(Hash64::Sip13 { key: Seed::DEFAULT });

/// Parses a 128-bit SipHash key given as 32 hex digits (`k0` then `k1`, big-endian text).
fn parse_hash_key(value: &str) -> Option<Seed> {
    if value.len() != 32 || !value.is_ascii() {
        return None;
    }
    let k0 = u64::from_str_radix(value.get(..16)?, 16).ok()?;
    let k1 = u64::from_str_radix(value.get(16..)?, 16).ok()?;
    Some(Seed::new(k0, k1))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1".to_string(),
            port: 6379,
            dir: PathBuf::from("."),
            dbfilename: "dump.tmbd".to_string(),
            appendfilename: "appendonly.tmbd".to_string(),
            save: vec![(3600, 1), (300, 100), (60, 10_000)],
            appendonly: false,
            appendfsync: AppendFsync::Everysec,
            requirepass: None,
            maxmemory: 0,
            max_request_bytes: 512 * 1024 * 1024,
            threads: 0,
            port_file: None,
            bloom_layout: DEFAULT_BLOOM_LAYOUT,
        }
    }
}

/// Parses a byte size with Redis' units: `100`, `1k`/`1kb` (1000/1024), `64mb`, `2gb`.
///
/// # Errors
/// [`Error::Config`] for anything else.
pub fn parse_memory(text: &str) -> Result<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| Error::Config(format!("bad memory value {text:?}")))?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1_000_000,
        "mb" => 1024 * 1024,
        "g" => 1_000_000_000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(Error::Config(format!("bad memory unit in {text:?}"))),
    };
    n.checked_mul(mul)
        .ok_or_else(|| Error::Config(format!("memory value {text:?} overflows")))
}

/// Parses save points, `"3600 1 300 100"`; `""` disables saving.
///
/// # Errors
/// [`Error::Config`] for an odd count or a non-number.
pub fn parse_save(text: &str) -> Result<Vec<(u64, u64)>> {
    let nums: Vec<u64> = text
        .split_whitespace()
        .map(|w| {
            w.parse()
                .map_err(|_| Error::Config(format!("bad save value {w:?}")))
        })
        .collect::<Result<_>>()?;
    if nums.len() % 2 != 0 {
        return Err(Error::Config(format!(
            "save needs pairs of <seconds> <changes>, got {text:?}"
        )));
    }
    Ok(nums.chunks(2).map(|p| (p[0], p[1])).collect())
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(Error::Config(format!("{key} must be yes or no, got {v:?}"))),
    }
}

impl Config {
    /// Applies one `name value` setting (config file line or `CONFIG SET`-like flag).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown name or a bad value.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let bad = |what: &str| Error::Config(format!("bad {what} value {value:?}"));
        match name.to_ascii_lowercase().as_str() {
            "bind" => self.bind = value.to_string(),
            "port" => self.port = value.parse().map_err(|_| bad("port"))?,
            "dir" => self.dir = PathBuf::from(value),
            "dbfilename" => self.dbfilename = value.to_string(),
            "appendfilename" => self.appendfilename = value.to_string(),
            "save" => self.save = parse_save(value)?,
            "appendonly" => self.appendonly = parse_bool(name, value)?,
            "appendfsync" => {
                self.appendfsync = match value.to_ascii_lowercase().as_str() {
                    "always" => AppendFsync::Always,
                    "everysec" => AppendFsync::Everysec,
                    "no" => AppendFsync::No,
                    _ => return Err(bad("appendfsync")),
                }
            }
            "requirepass" => {
                self.requirepass = if value.is_empty() {
                    None
                } else {
                    Some(value.to_string())
                }
            }
            "maxmemory" => self.maxmemory = parse_memory(value)?,
            "max-request-bytes" | "proto-max-bulk-len" => {
                self.max_request_bytes =
                    usize::try_from(parse_memory(value)?).map_err(|_| bad("max-request-bytes"))?;
            }
            "threads" | "io-threads" => self.threads = value.parse().map_err(|_| bad("threads"))?,
            "bloom-hash" => {
                let key = match self.bloom_layout {
                    ScalableLayout::SplitBlock(Hash64::Sip13 { key }) => key,
                    _ => Seed::DEFAULT,
                };
                self.bloom_layout = match value.to_ascii_lowercase().as_str() {
                    "siphash" => ScalableLayout::SplitBlock(Hash64::Sip13 { key }),
                    "xxh3" => ScalableLayout::SplitBlock(Hash64::XXH3),
                    "legacy" => ScalableLayout::Standard,
                    _ => return Err(bad("bloom-hash (siphash, xxh3 or legacy)")),
                }
            }
            "bloom-hash-key" => {
                let key =
                    parse_hash_key(value).ok_or_else(|| bad("bloom-hash-key (32 hex digits)"))?;
                self.bloom_layout = ScalableLayout::SplitBlock(Hash64::Sip13 { key });
            }
            _ => return Err(Error::Config(format!("unknown setting {name:?}"))),
        }
        Ok(())
    }

    /// Applies a config file: one `name value` per line, `#` comments, values optionally in
    /// double quotes (`save ""`).
    ///
    /// # Errors
    /// [`Error::Config`] naming the line, or [`Error::Io`].
    pub fn load_file(&mut self, path: &std::path::Path) -> Result<()> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading config {}", path.display()), e))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            self.set(name, value)
                .map_err(|e| Error::Config(format!("{}:{}: {e}", path.display(), n + 1)))?;
        }
        Ok(())
    }

    /// The snapshot's path.
    pub fn snapshot_path(&self) -> PathBuf {
        self.dir.join(&self.dbfilename)
    }

    /// The append-only log's path.
    pub fn aof_path(&self) -> PathBuf {
        self.dir.join(&self.appendfilename)
    }

    /// How often the save points are checked.
    pub fn save_check_interval(&self) -> Duration {
        Duration::from_millis(500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_save_points() {
        assert_eq!(parse_memory("100").unwrap(), 100);
        assert_eq!(parse_memory("2mb").unwrap(), 2 * 1024 * 1024);
        assert_eq!(parse_memory("1k").unwrap(), 1000);
        assert!(parse_memory("1tb").is_err());
        assert_eq!(parse_save("3600 1 60 5").unwrap(), vec![(3600, 1), (60, 5)]);
        assert!(parse_save("").unwrap().is_empty());
        assert!(parse_save("1").is_err());
    }

    #[test]
    fn bloom_hash_settings_choose_the_layout() {
        let mut c = Config::default();
        assert_eq!(c.bloom_layout, DEFAULT_BLOOM_LAYOUT);
        c.set("bloom-hash", "xxh3").unwrap();
        assert_eq!(c.bloom_layout, ScalableLayout::SplitBlock(Hash64::XXH3));
        c.set("bloom-hash-key", "000102030405060708090a0b0c0d0e0f")
            .unwrap();
        let key = Seed::new(0x0001_0203_0405_0607, 0x0809_0a0b_0c0d_0e0f);
        assert_eq!(
            c.bloom_layout,
            ScalableLayout::SplitBlock(Hash64::Sip13 { key })
        );
        // Switching back to siphash keeps the configured key.
        c.set("bloom-hash", "xxh3").unwrap();
        c.set("bloom-hash-key", "000102030405060708090a0b0c0d0e0f")
            .unwrap();
        c.set("bloom-hash", "siphash").unwrap();
        assert_eq!(
            c.bloom_layout,
            ScalableLayout::SplitBlock(Hash64::Sip13 { key })
        );
        c.set("bloom-hash", "legacy").unwrap();
        assert_eq!(c.bloom_layout, ScalableLayout::Standard);
        assert!(c.set("bloom-hash", "md5").is_err());
        assert!(c.set("bloom-hash-key", "abc").is_err());
        assert!(
            c.set("bloom-hash-key", "zz0102030405060708090a0b0c0d0e0f")
                .is_err()
        );
    }
}
