//! `tidemark-export`: writes the sealed time partitions of an index to a Parquet lake
//! (a Delta table), the same as `tidemark export`.

use std::process::ExitCode;

use clap::Parser;
use tidemark_lake::cli::{ExportArgs, run};

/// Export the sealed time partitions of a Tidemark index as a Parquet lake (a Delta
/// table that DuckDB, DataFusion and Spark read), exactly once per partition.
#[derive(Debug, Parser)]
#[command(name = "tidemark-export", version, about)]
struct Cli {
    #[command(flatten)]
    export: ExportArgs,
}

fn main() -> ExitCode {
    match run(&Cli::parse().export) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            let mut msg = format!("error: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!("\n  caused by: {cause}"));
            }
            eprintln!("{msg}");
            ExitCode::from(2)
        }
    }
}
