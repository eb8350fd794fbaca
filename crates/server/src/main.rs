//! `tidemark-server`: the Elasticsearch-compatible HTTP server, the same as
//! `tidemark serve` (both parse [`tidemark_server::cli::ServeArgs`]).

use std::process::ExitCode;

use clap::Parser;
use tidemark_server::cli::{ServeArgs, run};

// The parsed documents make many small allocations (see docs/results/ingest.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serve Tidemark indices over Elasticsearch's HTTP API.
#[derive(Debug, Parser)]
#[command(name = "tidemark-server", version, about)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> ExitCode {
    if let Err(e) = tidemark_server::memory::disable_transparent_huge_pages() {
        eprintln!("tidemark-server: transparent huge pages stay on: {e}");
    }
    match run(&Cli::parse().serve) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}
