//! Query text limits through the public API, on a thread with a tokio worker's 2 MiB
//! stack: queries that used to overflow it are refused with `bad_data` naming the
//! limit, and the largest accepted ones are parsed, evaluated and dropped on that stack.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tidemark_promql::{
    Error, MAX_NESTING, MAX_OPERATORS, MemStorage, QueryOptions, QueryValue, instant_query,
    range_query,
};

/// A tokio worker thread's default stack size.
const WORKER_STACK: usize = 2 << 20;

fn storage() -> MemStorage {
    let mut s = MemStorage::new();
    s.add(
        vec![("__name__".into(), "up".into()), ("job".into(), "a".into())],
        (0..=20).map(|i| (i * 15_000, 1.0)),
    );
    s
}

/// Runs `query` as an instant and a range query at t = 300 s on a 2 MiB stack.
fn on_worker_stack(query: String) -> (Result<QueryValue, Error>, Result<QueryValue, Error>) {
    std::thread::Builder::new()
        .stack_size(WORKER_STACK)
        .spawn(move || {
            let s = storage();
            let opts = QueryOptions::default();
            let instant = instant_query(&s, &query, 300_000, &opts);
            let range = range_query(&s, &query, 0, 300_000, 15_000, &opts);
            (instant, range)
        })
        .unwrap()
        .join()
        .expect("the query overflowed a 2 MiB stack")
}

fn refused(query: String, limit: &str) {
    let (instant, range) = on_worker_stack(query);
    for r in [instant, range] {
        match r {
            Err(e @ Error::BadData(_)) => {
                assert!(e.to_string().contains(limit), "{e}");
                assert_eq!(e.http_status(), 400);
            }
            other => panic!("expected bad_data naming {limit}, got {other:?}"),
        }
    }
}

fn scalar_at_end(v: QueryValue) -> f64 {
    match v {
        QueryValue::Scalar { v, .. } => v,
        QueryValue::Vector(s) => s[0].v,
        QueryValue::Matrix(m) => m[0].points.last().unwrap().1,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn the_queries_that_overflowed_the_stack_are_bad_data_naming_the_limit() {
    refused(vec!["1"; 5_000].join("+"), "max operators per query");
    refused(vec!["up"; 5_000].join(" + "), "max operators per query");
    refused("(".repeat(60_000), "max nesting depth");
    refused(
        format!("{}up{}", "abs(".repeat(10_000), ")".repeat(10_000)),
        "max nesting depth",
    );
    refused(
        format!("{}1", "-".repeat(10_000)),
        "max operators per query",
    );
    refused(
        format!("up{{a=\"{}\"}}", "x".repeat(200_000)),
        "max query length",
    );
}

#[test]
fn the_largest_accepted_queries_evaluate_on_a_worker_stack() {
    // A chain of the most operators: 1+1+…+1 = MAX_OPERATORS + 1.
    let chain = vec!["1"; MAX_OPERATORS + 1].join("+");
    let (instant, range) = on_worker_stack(chain);
    assert_eq!(scalar_at_end(instant.unwrap()), (MAX_OPERATORS + 1) as f64);
    assert_eq!(scalar_at_end(range.unwrap()), (MAX_OPERATORS + 1) as f64);

    // The deepest nesting of calls around a vector selector.
    let nested = format!(
        "{}up{}",
        "abs(".repeat(MAX_NESTING),
        ")".repeat(MAX_NESTING)
    );
    let (instant, range) = on_worker_stack(nested);
    assert_eq!(scalar_at_end(instant.unwrap()), 1.0);
    assert_eq!(scalar_at_end(range.unwrap()), 1.0);

    // Both at once: the deepest tree the limits allow.
    let inner = vec!["up"; MAX_OPERATORS - MAX_NESTING].join(" * ");
    let both = format!(
        "{}{inner}{}",
        "abs(".repeat(MAX_NESTING - 1),
        ")".repeat(MAX_NESTING - 1)
    );
    let (instant, range) = on_worker_stack(both);
    assert_eq!(scalar_at_end(instant.unwrap()), 1.0);
    assert_eq!(scalar_at_end(range.unwrap()), 1.0);
}
