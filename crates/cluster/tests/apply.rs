//! Shard messages applied to a real label-keyed index through the façade, as an owner
//! applies them: every sample stored once, a redelivered message all duplicates, a
//! client's re-sent request (new messages, same samples) all duplicates too.

use tidemark::{Index, LabelPoints, SampleBatch, label_mapping};
use tidemark_cluster::{ShardGroups, ShardMessage, group_line_protocol};
use tidemark_server::metrics::line_protocol::Precision;

type Res = Result<(), Box<dyn std::error::Error>>;

fn messages(body: &[u8]) -> Result<Vec<tidemark_cluster::Outgoing>, Box<dyn std::error::Error>> {
    let mut groups = ShardGroups::new("metrics", true, i64::MAX)?;
    let bad = group_line_protocol(body, Precision::Millis, 0, &mut groups);
    assert_eq!(bad.count, 0);
    Ok(groups.finish())
}

fn apply(
    index: &mut Index,
    payload: &[u8],
) -> Result<tidemark::SampleTally, Box<dyn std::error::Error>> {
    let msg = ShardMessage::decode(payload)?;
    let mut points = LabelPoints::new()?;
    let mut batch = SampleBatch::new(msg.create);
    msg.append_to(&mut points, &mut batch)?;
    let tally = index.append_samples(&[&batch])?;
    Ok(tally.into_iter().next().unwrap_or_default())
}

#[test]
fn redelivered_and_resent_messages_are_duplicates() -> Res {
    let dir = tempfile::tempdir()?;
    let mut index = Index::create(dir.path(), label_mapping()?)?;
    let mut body = String::new();
    for h in 0..40 {
        body.push_str(&format!(
            "cpu,host=h{h} user={h}.5,n={h}i,up=true 1700000000000\n"
        ));
    }
    let out = messages(body.as_bytes())?;
    assert!(out.len() > 1, "40 hosts spread over several shards");
    let mut created = 0;
    for m in &out {
        created += apply(&mut index, &m.payload)?.created;
    }
    assert_eq!(created, 120);
    // JetStream redelivers a message: every sample a duplicate.
    for m in &out {
        let t = apply(&mut index, &m.payload)?;
        assert_eq!((t.created, t.duplicates > 0), (0, true));
    }
    // A client re-sends the request split differently (other messages, other ids).
    let mut dup = 0;
    for line in body.lines().rev() {
        for m in messages(format!("{line}\n").as_bytes())? {
            let t = apply(&mut index, &m.payload)?;
            assert_eq!(t.created, 0);
            dup += t.duplicates;
        }
    }
    assert_eq!(dup, 120);
    Ok(())
}
