//! `cargo xtask fuzz`: runs the targets of `tidemark-fuzz` for a time budget, with
//! libFuzzer (built by `cargo +nightly fuzz build`, coverage-guided) or in-process on the stable
//! toolchain (mutations of the seeds, panics caught), and prints a table of executions,
//! coverage and crashes. Crashing inputs are copied to `crates/fuzz/regressions/<target>/`,
//! where `cargo test -p tidemark-fuzz` runs them from then on.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::project_root;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    LibFuzzer,
    Stable,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::LibFuzzer => "libfuzzer",
            Mode::Stable => "stable",
        }
    }
}

struct Options {
    seconds: u64,
    targets: Vec<&'static str>,
    mode: Option<Mode>,
    seed: u64,
    markdown: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut opts = Options {
        seconds: 60,
        targets: Vec::new(),
        mode: None,
        seed: 1,
        markdown: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seconds" => opts.seconds = value.parse().context("--seconds")?,
            "--target" => {
                for name in value.split(',').filter(|n| !n.is_empty()) {
                    let Some((known, _)) = tidemark_fuzz::TARGETS.iter().find(|(n, _)| *n == name)
                    else {
                        let names: Vec<&str> =
                            tidemark_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
                        bail!("unknown target {name:?}: one of {}", names.join(", "));
                    };
                    opts.targets.push(known);
                }
            }
            "--mode" => {
                opts.mode = Some(match value.as_str() {
                    "libfuzzer" => Mode::LibFuzzer,
                    "stable" => Mode::Stable,
                    other => bail!("--mode {other:?}: libfuzzer or stable"),
                })
            }
            "--seed" => opts.seed = value.parse().context("--seed")?,
            "--markdown" => opts.markdown = Some(PathBuf::from(value)),
            _ => bail!("unknown option {flag:?}"),
        }
    }
    if opts.targets.is_empty() {
        opts.targets = tidemark_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    }
    if opts.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    Ok(opts)
}

/// One target's run.
#[derive(Debug, Default)]
struct Report {
    target: &'static str,
    mode: &'static str,
    seconds: f64,
    execs: u64,
    /// libFuzzer's `cov:` and `ft:` (edges and features) at the end of the run.
    coverage: Option<(u64, u64)>,
    /// The corpus at the end: libFuzzer's `corp:` (inputs kept / their size), and the
    /// files in the corpus directory (which also keeps earlier runs' inputs).
    corpus: Option<(String, usize)>,
    crashes: Vec<PathBuf>,
    note: String,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let opts = parse(args)?;
    let mode = match opts.mode {
        Some(m) => m,
        None if libfuzzer_available() => Mode::LibFuzzer,
        None => {
            println!("cargo +nightly fuzz is not available: running the stable in-process loop");
            Mode::Stable
        }
    };
    let per_target = (opts.seconds / opts.targets.len() as u64).max(1);
    println!(
        "fuzz: {} target(s), {per_target} s each, mode {}",
        opts.targets.len(),
        mode.name()
    );
    let reports = match mode {
        Mode::LibFuzzer => run_libfuzzer(&opts.targets, per_target)?,
        Mode::Stable => run_stable(&opts.targets, per_target, opts.seed),
    };
    let table = markdown(&reports);
    println!("\n{table}");
    if let Some(path) = &opts.markdown {
        std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
    }
    let crashed: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.crashes
                .iter()
                .map(|c| format!("{}: {}", r.target, c.display()))
        })
        .collect();
    if !crashed.is_empty() {
        bail!(
            "{} crashing input(s), saved as regression tests:\n  {}",
            crashed.len(),
            crashed.join("\n  ")
        );
    }
    Ok(())
}

fn markdown(reports: &[Report]) -> String {
    let mut out = String::from(
        "| target | mode | seconds | execs | execs/s | cov | ft | corpus (libFuzzer corp:; files in dir) | crashes |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in reports {
        let rate = if r.seconds > 0.0 {
            (r.execs as f64 / r.seconds).round()
        } else {
            0.0
        };
        let (cov, ft) = r
            .coverage
            .map_or(("–".to_owned(), "–".to_owned()), |(c, f)| {
                (c.to_string(), f.to_string())
            });
        let corpus = r
            .corpus
            .as_ref()
            .map_or("–".to_owned(), |(corp, files)| format!("{corp}; {files}"));
        let crashes = if r.note.is_empty() {
            r.crashes.len().to_string()
        } else {
            format!("{} ({})", r.crashes.len(), r.note)
        };
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {rate} | {cov} | {ft} | {corpus} | {crashes} |\n",
            r.target, r.mode, r.seconds, r.execs
        ));
    }
    out
}

fn regressions_dir(target: &str) -> PathBuf {
    project_root().join("crates/fuzz/regressions").join(target)
}

fn corpus_dir(target: &str) -> PathBuf {
    project_root().join("target/fuzz-corpus").join(target)
}

fn short_hash(bytes: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{:016x}", h.finish())
}

// ---------------------------------------------------------------------------------------
// libFuzzer through cargo-fuzz.

fn libfuzzer_available() -> bool {
    let ok = |args: &[&str]| {
        nightly_cargo(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    ok(&["--version"]) && ok(&["fuzz", "--version"])
}

/// `cargo +nightly <args>`, without the variables this xtask's own (stable) cargo set,
/// which would make cargo-fuzz build with the stable toolchain.
fn nightly_cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").args(args).current_dir(project_root());
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The cargo-fuzz options shared by build and run: the fuzz project, its feature, and a
/// target directory of its own (a nightly, sanitized build shares nothing with the
/// workspace's).
fn fuzz_project_args() -> Vec<String> {
    let target_dir = project_root().join("target/fuzz");
    vec![
        "--fuzz-dir".into(),
        "crates/fuzz".into(),
        "--features".into(),
        "libfuzzer".into(),
        "--target-dir".into(),
        target_dir.display().to_string(),
    ]
}

fn run_libfuzzer(targets: &[&'static str], seconds: u64) -> Result<Vec<Report>> {
    let mut build: Vec<String> = vec!["fuzz".into(), "build".into()];
    build.extend(fuzz_project_args());
    if targets.len() == 1 {
        build.push(targets[0].to_owned());
    }
    println!(
        "building the libFuzzer binaries: cargo +nightly {}",
        build.join(" ")
    );
    let refs: Vec<&str> = build.iter().map(String::as_str).collect();
    let status = nightly_cargo(&refs)
        .status()
        .context("running cargo +nightly fuzz build")?;
    if !status.success() {
        bail!("cargo +nightly fuzz build failed ({status})");
    }
    targets
        .iter()
        .map(|t| run_one_libfuzzer(t, seconds))
        .collect()
}

/// Writes `target`'s seeds into its corpus directory (once: libFuzzer keeps and minimizes
/// what it finds there).
fn seed_corpus(target: &str) -> Result<PathBuf> {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for seed in tidemark_fuzz::seeds(target) {
        let path = dir.join(format!("seed-{}", short_hash(&seed)));
        if !path.exists() {
            std::fs::write(&path, &seed).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(dir)
}

fn file_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .count()
}

/// The numbers of libFuzzer's status lines (`#123 DONE cov: 45 ft: 67 corp: 8/1Kb ...`)
/// and final stats (`stat::number_of_executed_units: 123`).
#[derive(Debug, Default)]
struct LibFuzzerStats {
    execs: Option<u64>,
    cov: Option<u64>,
    ft: Option<u64>,
    /// `corp: 564/1860Kb`: inputs kept and their size.
    corp: Option<String>,
}

impl LibFuzzerStats {
    fn read(&mut self, line: &str) {
        let number_after = |key: &str| -> Option<u64> {
            let rest = line.split(key).nth(1)?;
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        };
        if line.starts_with('#') && line.contains(" cov: ") {
            self.cov = number_after(" cov: ").or(self.cov);
            self.ft = number_after(" ft: ").or(self.ft);
            self.execs = number_after("#").or(self.execs);
            if let Some(corp) = line
                .split(" corp: ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                self.corp = Some(corp.to_owned());
            }
        }
        if let Some(n) = number_after("stat::number_of_executed_units:") {
            self.execs = Some(n);
        }
    }
}

/// The libFuzzer binary of `target` that `cargo fuzz build` left in
/// `target/fuzz/<triple>/release/`.
fn fuzz_binary(target: &str) -> Result<PathBuf> {
    let dir = project_root().join("target/fuzz");
    std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path().join("release").join(target))
        .find(|p| p.is_file())
        .with_context(|| format!("no libFuzzer binary of {target} under {}", dir.display()))
}

fn run_one_libfuzzer(target: &'static str, seconds: u64) -> Result<Report> {
    let corpus = seed_corpus(target)?;
    let regressions = regressions_dir(target);
    std::fs::create_dir_all(&regressions)?;
    let artifacts = project_root().join("target/fuzz-artifacts").join(target);
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts)?;
    // The binaries of the one `cargo fuzz build` above run directly, as `cargo fuzz run`
    // would run them, so that every target fuzzes the same build even while the
    // workspace changes (`cargo fuzz run` would rebuild first).
    let binary = fuzz_binary(target)?;
    let mut args: Vec<String> = vec![
        corpus.display().to_string(),
        regressions.display().to_string(),
    ];
    args.extend([
        format!("-max_total_time={seconds}"),
        "-rss_limit_mb=2048".into(),
        format!("-max_len={}", tidemark_fuzz::max_len(target)),
        "-timeout=10".into(),
        "-print_final_stats=1".into(),
        format!("-artifact_prefix={}/", artifacts.display()),
    ]);
    println!("\n== {target}: {} {}", binary.display(), args.join(" "));
    let start = Instant::now();
    let mut child = Command::new(&binary)
        .args(&args)
        .current_dir(project_root())
        // What `cargo fuzz run` sets.
        .env("ASAN_OPTIONS", "detect_odr_violation=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", binary.display()))?;
    let log_path = project_root()
        .join("target/fuzz-artifacts")
        .join(format!("{target}.log"));
    let log = Arc::new(Mutex::new(std::fs::File::create(&log_path)?));
    let stats = Arc::new(Mutex::new(LibFuzzerStats::default()));
    let mut readers = Vec::new();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let (log, stats) = (Arc::clone(&log), Arc::clone(&stats));
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Ok(mut f) = log.lock() {
                    let _ = writeln!(f, "{line}");
                }
                if let Ok(mut s) = stats.lock() {
                    s.read(&line);
                }
                // Progress: libFuzzer's periodic lines, the end, and whatever went wrong.
                if line.contains("pulse")
                    || line.contains("DONE")
                    || line.contains("ERROR")
                    || line.contains("panicked")
                    || line.starts_with("SUMMARY")
                    || line.starts_with("stat::")
                    || line.contains("Test unit written")
                {
                    println!("  {target}: {line}");
                }
            }
        }));
    }
    let status = child.wait()?;
    for r in readers {
        let _ = r.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = stats
        .lock()
        .map(|s| (s.execs, s.cov, s.ft, s.corp.clone()))
        .unwrap_or_default();
    let mut crashes = Vec::new();
    for entry in std::fs::read_dir(&artifacts)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if ["crash-", "oom-", "timeout-", "leak-"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            let dest = regressions.join(&name);
            std::fs::copy(entry.path(), &dest)?;
            crashes.push(dest);
        }
    }
    let note = if status.success() || !crashes.is_empty() {
        String::new()
    } else {
        format!("exited {status}, see {}", log_path.display())
    };
    Ok(Report {
        target,
        mode: Mode::LibFuzzer.name(),
        seconds: elapsed,
        execs: stats.0.unwrap_or(0),
        coverage: stats.1.zip(stats.2),
        corpus: Some((stats.3.unwrap_or_else(|| "–".into()), file_count(&corpus))),
        crashes,
        note,
    })
}

// ---------------------------------------------------------------------------------------
// The stable in-process loop.

/// SplitMix64: a seeded generator, so a run can be repeated with `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes and words that mean something in the formats fuzzed (JSON, line protocol,
/// RESP, PromQL, protobuf and varints, little-endian lengths).
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\\",
    b"\n",
    b"\r\n",
    b" ",
    b"=",
    b"*",
    b"$",
    b"null",
    b"true",
    b"false",
    b"-1",
    b"0",
    b"1e308",
    b"NaN",
    b"-0",
    b"18446744073709551616",
    b"9223372036854775807",
    b"\\u0000",
    b"\xff",
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    b"(",
    b")",
    b"[5m]",
    b"by",
    b"offset",
    b"@",
    b"{}",
    b"\"_id\"",
    b"@timestamp",
];

const INTERESTING_U64: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    16,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    i64::MIN as u64,
    u64::MAX,
];

/// A mutation of `base`: one to four byte-level edits (flips, interesting values,
/// insertions, deletions, copies, truncation, splicing with `other`, format tokens),
/// at most `max_len` bytes.
fn mutate(base: &[u8], other: &[u8], rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..=rng.below(4) {
        let len = b.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = rng.next() as u8;
            }
            2 if len > 0 => {
                let i = rng.below(len);
                b[i] = [0u8, 1, 0x7f, 0x80, 0xff, b'{', b'"', b'\n', b'\\', b'0'][rng.below(10)];
            }
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = (1 + rng.below(16)).min(len - at);
                b.drain(at..at + n);
            }
            5 if len > 0 => {
                let from = rng.below(len);
                let n = (1 + rng.below(64)).min(len - from);
                let chunk = b[from..from + n].to_vec();
                let at = rng.below(len + 1);
                b.splice(at..at, chunk);
            }
            6 if len > 0 => b.truncate(rng.below(len)),
            7 if !other.is_empty() => {
                let cut = rng.below(len + 1);
                let from = rng.below(other.len());
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            8 if len >= 8 => {
                let v = INTERESTING_U64[rng.below(INTERESTING_U64.len())];
                let width = [1usize, 2, 4, 8][rng.below(4)];
                let at = rng.below(len - width + 1);
                let bytes = if rng.below(2) == 0 {
                    v.to_le_bytes()
                } else {
                    (v << (64 - 8 * width as u32).min(63)).to_be_bytes()
                };
                b[at..at + width].copy_from_slice(&bytes[..width]);
            }
            _ => {
                let token = TOKENS[rng.below(TOKENS.len())];
                let at = rng.below(len + 1);
                b.splice(at..at, token.iter().copied());
            }
        }
    }
    b.truncate(max_len);
    b
}

/// The inputs the loop starts from: the seeds, the regression inputs, and what libFuzzer
/// left in the corpus directory (up to 512 files).
fn pool(target: &str) -> Vec<Vec<u8>> {
    let max_len = tidemark_fuzz::max_len(target);
    let mut pool = tidemark_fuzz::seeds(target);
    for dir in [regressions_dir(target), corpus_dir(target)] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        pool.extend(
            files
                .iter()
                .take(512)
                .filter_map(|p| std::fs::read(p).ok())
                .filter(|b| !b.is_empty() && b.len() <= max_len),
        );
    }
    pool
}

fn run_stable(targets: &[&'static str], seconds: u64, seed: u64) -> Vec<Report> {
    // Panics are expected here and reported with their input; the default hook would
    // print each one as it happens, in the middle of the progress lines.
    let last_panic: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let hook_slot = Arc::clone(&last_panic);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut slot) = hook_slot.lock() {
            *slot = Some(info.to_string());
        }
    }));
    let reports = targets
        .iter()
        .map(|t| run_one_stable(t, seconds, seed, &last_panic))
        .collect();
    std::panic::set_hook(default_hook);
    reports
}

fn run_one_stable(
    target: &'static str,
    seconds: u64,
    seed: u64,
    last_panic: &Mutex<Option<String>>,
) -> Report {
    let mut report = Report {
        target,
        mode: Mode::Stable.name(),
        ..Report::default()
    };
    let Some(f) = tidemark_fuzz::target(target) else {
        return report;
    };
    let mut pool = pool(target);
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let max_len = tidemark_fuzz::max_len(target);
    let mut h = DefaultHasher::new();
    target.hash(&mut h);
    let mut rng = Rng(seed ^ h.finish());
    let start = Instant::now();
    let budget = Duration::from_secs(seconds);
    let mut next_progress = Duration::from_secs(5);
    println!("== {target}: {} inputs to mutate", pool.len());
    while start.elapsed() < budget && report.crashes.len() < 3 {
        // The pool as it is first, then mutations of it.
        let input = match usize::try_from(report.execs).ok().and_then(|i| pool.get(i)) {
            Some(p) => p.clone(),
            None => {
                let base = &pool[rng.below(pool.len())];
                let other = &pool[rng.below(pool.len())];
                mutate(base, other, &mut rng, max_len)
            }
        };
        report.execs += 1;
        if catch_unwind(AssertUnwindSafe(|| f(&input))).is_err() {
            let message = last_panic
                .lock()
                .ok()
                .and_then(|mut s| s.take())
                .unwrap_or_default();
            let dir = regressions_dir(target);
            let path = dir.join(format!("stable-{}", short_hash(&input)));
            let saved = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &input));
            println!(
                "  {target}: PANIC on a {}-byte input{}:\n    {message}",
                input.len(),
                if saved.is_ok() {
                    format!(" (saved as {})", path.display())
                } else {
                    String::new()
                }
            );
            report.crashes.push(path);
        }
        if start.elapsed() >= next_progress {
            let s = start.elapsed().as_secs_f64();
            println!(
                "  {target}: {} execs in {s:.0} s ({:.0}/s)",
                report.execs,
                report.execs as f64 / s
            );
            next_progress += Duration::from_secs(5);
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    if report.crashes.len() >= 3 {
        report.note = "stopped after 3".into();
    }
    report
}
