//! What the simulator keeps is bounded.

use super::*;
use crate::sim::NewCommand;

fn bounded(record: usize, completed: usize) -> SimConfig {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.record_capacity = record;
    config.completed_capacity = completed;
    config
}

#[tokio::test]
async fn the_record_and_the_completed_requests_stay_at_their_bound() {
    let (sim, c) = start_with(bounded(3, 2)).await;
    let request_ids: Vec<String> = (0..5)
        .map(|i| sim.enqueue(NewCommand::jsonrpc(call(i, "echo"))))
        .collect();
    let mut shards = Vec::new();
    while shards.len() < request_ids.len() {
        for cmd in c.commands().await {
            shards.push(ids(&cmd).1);
        }
    }
    for (i, (id, shard)) in request_ids.iter().zip(&shards).enumerate() {
        let resp = c.respond(shard, &final_body(id, i64::try_from(i).unwrap())).await;
        assert_eq!(resp.status(), 200);
    }

    let rec = sim.record();
    assert_eq!(rec.commands.len(), 3);
    assert_eq!(rec.dropped.commands, 2);
    assert_eq!(
        rec.commands.iter().map(|c| c.order).collect::<Vec<_>>(),
        [3, 4, 5],
        "the oldest entries are dropped first"
    );
    assert!(rec.commands.iter().all(|c| c.issued));
    assert_eq!(rec.responses.len(), 3);
    assert_eq!(rec.dropped.responses, 2);
    assert!(rec.responses.iter().all(|r| r.completed && r.status == Some(200)));
    assert!(rec.polls.len() <= 3);
    assert_eq!(
        sim.shared.requests_kept(),
        2,
        "only the 2 latest completed requests are kept"
    );

    // Forgotten or remembered, a completed request answers a repeated POST with 404.
    for (i, (id, shard)) in request_ids.iter().zip(&shards).enumerate() {
        let again = c.respond(shard, &final_body(id, i64::try_from(i).unwrap())).await;
        assert_eq!(again.status(), 404, "{id}");
    }
    let rec = sim.record();
    assert_eq!((rec.responses.len(), rec.dropped.responses), (3, 7));
    assert_eq!(sim.shared.requests_kept(), 2);
    let totals = sim.totals();
    assert_eq!((totals.issued, totals.responses, totals.completed), (5, 10, 5));
}
