//! Groups an Influx line-protocol body by virtual shard, as a router does, and reads the
//! messages back, as a shard owner does: `cargo run -p tidemark-cluster --example basic`.

use tidemark_cluster::{ShardGroups, ShardMessage, group_line_protocol};
use tidemark_server::metrics::line_protocol::Precision;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let body = b"cpu,host=a user=0.5,system=0.1 1700000000000\n\
                 cpu,host=b user=0.7,system=0.2 1700000000000\n\
                 mem,host=a used=123i 1700000000000\n";
    let mut groups = ShardGroups::new("metrics", true, i64::MAX)?;
    let bad = group_line_protocol(body, Precision::Millis, 0, &mut groups);
    assert_eq!(bad.count, 0);
    for m in groups.finish() {
        let decoded = ShardMessage::decode(&m.payload)?;
        let mut series = Vec::new();
        decoded.for_each_run(|labels, samples| {
            let name = labels.first().map_or("", |l| l.1);
            series.push(format!("{name}×{}", samples.len()));
            Ok(())
        })?;
        println!(
            "shard {:3}  subject tidemark.shard.{}  id {}  {} bytes  {}",
            m.shard,
            m.shard,
            m.id,
            m.payload.len(),
            series.join(", ")
        );
    }
    Ok(())
}
