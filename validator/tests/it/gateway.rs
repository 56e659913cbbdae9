//! The gateway over real gRPC into a real redis-server: a submission is
//! answered Success once it is queued with its timeline entry and metadata;
//! with Redis down it is UNAVAILABLE (the node retries) and nothing is lost.

use std::time::Duration;

use lite_node_protocol::proto::{self, submission_client::SubmissionClient};
use lite_node_testkit::RedisServer;
use lite_node_validator::{Keys, ReliableQueue, gateway::Gateway};
use redis::AsyncCommands;

fn submission(epoch_id: u64, slot_id: u64) -> proto::SnapshotSubmission {
    proto::SnapshotSubmission {
        request: Some(proto::Request {
            slot_id,
            deadline: 100,
            snapshot_cid: "bafkreicecnx2gvntm6fbcrvnc336qze6st5u7qq7457igegamd3bzkx7ri".into(),
            epoch_id,
            project_id: "baseSnapshot:0xaa:devnet-UNISWAPV3-ETH".into(),
        }),
        signature: "00".into(),
        header: String::new(),
        data_market: "0xdm".into(),
        node_version: None,
        protocol_state: "0xps".into(),
    }
}

#[tokio::test]
async fn a_submission_is_answered_once_it_is_queued_with_its_timeline_and_metadata() {
    let server = RedisServer::start();
    let keys = Keys::new("0xPS", "0xDM");
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(server.url()).unwrap()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(lite_node_validator::gateway::serve(
        Gateway::new(conn.clone(), keys.clone()),
        listener,
        std::future::pending(),
    ));
    let mut client = SubmissionClient::connect(endpoint).await.unwrap();
    let answer = client.submit_snapshot(submission(7, 3)).await.unwrap().into_inner();
    assert_eq!(answer.message, proto::SUCCESS);

    let queue = ReliableQueue::submissions(conn.clone(), &keys);
    let taken = queue.take(Duration::from_secs(1)).await.unwrap().expect("queued");
    let queued: serde_json::Value = serde_json::from_str(&taken.payload).unwrap();
    assert_eq!(queued["request"]["epochId"], 7);
    assert_eq!(queued["request"]["slotId"], 3);
    let mut conn = conn;
    let timeline: Vec<String> = conn.zrange(keys.submissions_timeline(), 0, -1).await.unwrap();
    assert_eq!(timeline.len(), 1);
    assert!(timeline[0].starts_with("received:7:3:baseSnapshot:0xaa:devnet-UNISWAPV3-ETH:"), "{}", timeline[0]);
    let metadata_key = keys.submission_metadata(&timeline[0]);
    let metadata: String = conn.get(&metadata_key).await.unwrap();
    assert!(metadata.contains("\"snapshot_cid\":\"bafkrei"), "{metadata}");
    let ttl: i64 = conn.ttl(&metadata_key).await.unwrap();
    assert!(ttl > 86_000 && ttl <= 86_400, "24 h: {ttl}");

    // Redis goes away: the node is told to retry, not that it succeeded.
    drop(server);
    let refused = client.submit_snapshot(submission(8, 3)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
}
