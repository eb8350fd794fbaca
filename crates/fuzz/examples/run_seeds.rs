//! Runs every fuzz target once on each of its seeds and prints how many there were and
//! how long they took: `cargo run -p tidemark-fuzz --example run_seeds`.

use std::time::Instant;

fn main() {
    for (name, target) in tidemark_fuzz::TARGETS {
        let seeds = tidemark_fuzz::seeds(name);
        let start = Instant::now();
        for seed in &seeds {
            target(seed);
        }
        let bytes: usize = seeds.iter().map(Vec::len).sum();
        println!(
            "{name:<20} {:>3} seeds {:>7} bytes {:>8.1} ms",
            seeds.len(),
            bytes,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
}
