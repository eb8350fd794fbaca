//! Evaluates PromQL over an in-memory storage and prints the Prometheus API JSON.
//!
//! `cargo run -p tidemark-promql --example promql_query -- 'sum by (job) (rate(http_requests_total[1m]))'`

use tidemark_promql::{MemStorage, QueryOptions, api, instant_query, range_query};

fn main() -> Result<(), tidemark_promql::Error> {
    let query = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sum by (job) (rate(http_requests_total[1m]))".to_owned());
    let mut storage = MemStorage::new();
    for (job, per_scrape) in [("api", 10.0), ("web", 4.0)] {
        let labels = vec![
            ("__name__".to_owned(), "http_requests_total".to_owned()),
            ("job".to_owned(), job.to_owned()),
        ];
        // Scraped every 15 s for 10 minutes.
        storage.add(
            labels,
            (0..=40).map(|i| (i * 15_000, i as f64 * per_scrape)),
        );
    }
    let opts = QueryOptions::default();
    let instant = instant_query(&storage, &query, 600_000, &opts)?;
    println!(
        "instant at 600 s: {}",
        api::success_json(api::data_json(&instant))
    );
    let range = range_query(&storage, &query, 300_000, 600_000, 60_000, &opts)?;
    println!(
        "range 300..600 s step 60 s: {}",
        api::success_json(api::data_json(&range))
    );
    Ok(())
}
