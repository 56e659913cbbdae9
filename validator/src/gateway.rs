//! The gateway: the collector's gRPC service (docs/protocol.md §6) in front
//! of the validator. Each submission is queued for the dequeuers
//! (`submissionQueue`), noted on the submissions timeline with its metadata
//! (24 h), and answered `Success` only once all of that is durably in Redis —
//! in one transaction. Redis unreachable → gRPC `UNAVAILABLE`: the node
//! retries, nothing is half-written. Checking is the dequeuer's job.

use lite_node_protocol::proto::{self, SnapshotSubmission, SubmissionResponse};
use redis::aio::ConnectionManager;
use serde_json::json;

use crate::keys::{Keys, SUBMISSION_METADATA_TTL};

/// The gateway's gRPC service.
#[derive(Clone)]
pub struct Gateway {
    conn: ConnectionManager,
    keys: Keys,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("keys", &self.keys).finish_non_exhaustive()
    }
}

/// A submission as it travels through Redis (the seed's JSON-encoded
/// submission), with when and from where it arrived.
pub fn encode(s: &SnapshotSubmission, received_at: u64, peer: &str) -> serde_json::Value {
    let r = s.request.clone().unwrap_or_default();
    json!({
        "request": {
            "slotId": r.slot_id,
            "deadline": r.deadline,
            "snapshotCid": r.snapshot_cid,
            "epochId": r.epoch_id,
            "projectId": r.project_id,
        },
        "signature": s.signature,
        "header": s.header,
        "dataMarket": s.data_market,
        "nodeVersion": s.node_version,
        "protocolState": s.protocol_state,
        "receivedAt": received_at,
        "peerId": peer,
    })
}

/// A submission read back from Redis, with when it arrived; `Err` names
/// what is wrong with a payload that is not one.
pub fn decode(payload: &str) -> Result<(SnapshotSubmission, u64), String> {
    let v: serde_json::Value = serde_json::from_str(payload).map_err(|e| format!("not JSON: {e}"))?;
    let r = v.get("request").filter(|r| r.is_object()).ok_or("no request object")?;
    let text = |o: &serde_json::Value, k: &str| -> Result<String, String> {
        o.get(k).and_then(|x| x.as_str()).map(str::to_owned).ok_or_else(|| format!("`{k}` is not text"))
    };
    let number = |o: &serde_json::Value, k: &str| -> Result<u64, String> {
        o.get(k).and_then(serde_json::Value::as_u64).ok_or_else(|| format!("`{k}` is not a whole number"))
    };
    let submission = SnapshotSubmission {
        request: Some(proto::Request {
            slot_id: number(r, "slotId")?,
            deadline: number(r, "deadline")?,
            snapshot_cid: text(r, "snapshotCid")?,
            epoch_id: number(r, "epochId")?,
            project_id: text(r, "projectId")?,
        }),
        signature: text(&v, "signature")?,
        header: v.get("header").and_then(|x| x.as_str()).unwrap_or_default().to_owned(),
        data_market: text(&v, "dataMarket")?,
        node_version: v.get("nodeVersion").and_then(|x| x.as_str()).map(str::to_owned),
        protocol_state: text(&v, "protocolState")?,
    };
    Ok((submission, v.get("receivedAt").and_then(serde_json::Value::as_u64).unwrap_or(0)))
}

impl Gateway {
    pub fn new(conn: ConnectionManager, keys: Keys) -> Self {
        Self { conn, keys }
    }

    /// Queues one submission with its timeline entry and metadata, in one
    /// transaction.
    pub async fn accept(&self, s: &SnapshotSubmission, peer: &str) -> redis::RedisResult<()> {
        let r = s.request.clone().unwrap_or_default();
        let millis = crate::now_ms();
        let secs = millis / 1000;
        let entity = format!("received:{}:{}:{}:{millis}:{peer}", r.epoch_id, r.slot_id, r.project_id);
        let metadata = json!({
            "epoch_id": r.epoch_id.to_string(),
            "slot_id": r.slot_id,
            "project_id": r.project_id,
            "snapshot_cid": r.snapshot_cid,
            "peer_id": peer,
            "timestamp": secs,
            "entity_id": entity,
        });
        let mut conn = self.conn.clone();
        redis::pipe()
            .atomic()
            .lpush(self.keys.submission_queue(), encode(s, millis, peer).to_string())
            .ignore()
            .zadd(self.keys.submissions_timeline(), &entity, secs)
            .ignore()
            .set_ex(self.keys.submission_metadata(&entity), metadata.to_string(), SUBMISSION_METADATA_TTL.as_secs())
            .ignore()
            .hincr(self.keys.counters(), "received", 1)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
    }
}

#[tonic::async_trait]
impl proto::submission_server::Submission for Gateway {
    async fn submit_snapshot(
        &self,
        request: tonic::Request<SnapshotSubmission>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let peer = request.remote_addr().map_or_else(|| "grpc".to_owned(), |a| format!("grpc-{a}"));
        let s = request.into_inner();
        if s.request.is_none() {
            return Ok(tonic::Response::new(SubmissionResponse { message: proto::FAILURE.into() }));
        }
        match self.accept(&s, &peer).await {
            Ok(()) => Ok(tonic::Response::new(SubmissionResponse { message: proto::SUCCESS.into() })),
            Err(e) => {
                tracing::warn!("cannot queue a submission ({e}); the node will retry");
                Err(tonic::Status::unavailable(format!("the validator's queue is unavailable: {e}")))
            }
        }
    }

    async fn submit_snapshot_simulation(
        &self,
        request: tonic::Request<tonic::Streaming<SnapshotSubmission>>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let peer = request.remote_addr().map_or_else(|| "grpc".to_owned(), |a| format!("grpc-{a}"));
        let mut stream = request.into_inner();
        while let Some(s) = stream.message().await? {
            self.accept(&s, &peer)
                .await
                .map_err(|e| tonic::Status::unavailable(format!("the validator's queue is unavailable: {e}")))?;
        }
        Ok(tonic::Response::new(SubmissionResponse { message: proto::SUCCESS.into() }))
    }
}

/// Serves the gateway on `listener` until `shutdown` completes.
pub async fn serve(
    gateway: Gateway,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(proto::submission_server::SubmissionServer::new(gateway))
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), shutdown)
        .await
}
