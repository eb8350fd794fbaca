//! `tidemark-bloomd`: serves RedisBloom's `BF.*` commands over the Redis protocol.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tidemark_bloomd::Config;

/// A Redis-protocol server for Tidemark's scalable bloom filters (BF.* commands).
#[derive(Debug, Parser)]
#[command(name = "tidemark-bloomd", version)]
struct Args {
    /// A config file of `name value` lines (Redis style); flags override it.
    config: Option<PathBuf>,
    /// Address to bind.
    #[arg(long)]
    bind: Option<String>,
    /// TCP port (0 picks a free one; see --port-file).
    #[arg(long)]
    port: Option<u16>,
    /// Directory of the snapshot and the append-only log.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Save points, "seconds changes ..." (e.g. "3600 1 300 100"); "" disables saving.
    #[arg(long)]
    save: Option<String>,
    /// Log every write to the append-only file: yes or no.
    #[arg(long)]
    appendonly: Option<String>,
    /// always, everysec or no.
    #[arg(long)]
    appendfsync: Option<String>,
    /// Password clients must give with AUTH.
    #[arg(long)]
    requirepass: Option<String>,
    /// Memory limit for stored values (e.g. 2gb); writes past it answer -OOM.
    #[arg(long)]
    maxmemory: Option<String>,
    /// Largest accepted bulk string (item, key or chunk), e.g. 512mb.
    #[arg(long)]
    max_request_bytes: Option<String>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<String>,
    /// Write the bound port to this file once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Hash of new filters: siphash (keyed, the default: items from untrusted clients),
    /// xxh3 (fastest, unkeyed: trusted clients only) or legacy (format-1 standard layers).
    #[arg(long)]
    bloom_hash: Option<String>,
    /// Secret SipHash key of new filters, 32 hex digits (set it when clients are not
    /// trusted; the default key is public).
    #[arg(long)]
    bloom_hash_key: Option<String>,
}

fn configure(args: Args) -> tidemark_bloomd::Result<Config> {
    let mut c = Config::default();
    if let Some(path) = &args.config {
        c.load_file(path)?;
    }
    let flags: [(&str, Option<String>); 11] = [
        ("bind", args.bind),
        ("port", args.port.map(|p| p.to_string())),
        ("dir", args.dir.map(|d| d.display().to_string())),
        ("save", args.save),
        ("appendonly", args.appendonly),
        ("appendfsync", args.appendfsync),
        ("requirepass", args.requirepass),
        ("maxmemory", args.maxmemory),
        ("max-request-bytes", args.max_request_bytes),
        ("bloom-hash", args.bloom_hash),
        ("bloom-hash-key", args.bloom_hash_key),
    ];
    for (name, value) in flags {
        if let Some(v) = value {
            c.set(name, &v)?;
        }
    }
    if let Some(t) = args.threads {
        c.set("threads", &t)?;
    }
    if args.port_file.is_some() {
        c.port_file = args.port_file;
    }
    Ok(c)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = configure(args).and_then(tidemark_bloomd::run);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-bloomd: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
