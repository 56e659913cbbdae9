//! The node's side of submitting: for each computed snapshot of an epoch,
//! unless the ledger already holds it — upload to IPFS when configured (the
//! CID must agree), read the anchor head for the deadline and header, sign,
//! send, and record the collector's answer before anything else happens.

use lite_node_protocol::{
    eip712::{Request, Signer},
    proto, quantity,
};

use std::sync::Arc;

use lite_node_core::time::now_ms;

use super::{Ledger, Status, Submission, Verdict, submit};
use crate::{
    chain::Anchor,
    epochs::Epoch,
    ipfs::Ipfs,
    retry::{Policy, retry},
    snapshots::Stored,
    status::{NodeStatus, Trouble},
};

/// Signs and sends computed snapshots, once per (epoch, project id).
#[derive(Debug)]
pub struct Submitter {
    pub signer: Signer,
    pub ledger: Ledger,
    /// The collector's gRPC endpoint (`http://host:port`).
    pub endpoint: String,
    pub ipfs: Option<Ipfs>,
    pub slot_id: u64,
    /// Anchor blocks a submission stays valid past the head it was signed at.
    pub deadline_buffer: u64,
    pub data_market: String,
    pub protocol_state: String,
    /// Where a collector that cannot be reached shows (`/health`, metrics).
    pub status: Arc<NodeStatus>,
}

impl Submitter {
    /// The submitting stage: every stored snapshot of a computed result,
    /// each answer as it came. Errors only when the ledger cannot be written.
    pub async fn submit(&self, epoch: &Epoch, stored: &[Stored], anchor: &Anchor) -> anyhow::Result<Vec<Submission>> {
        let mut submissions = Vec::with_capacity(stored.len());
        for stored in stored {
            let status = self.submit_one(epoch, stored, anchor).await?;
            submissions.push(Submission { project_id: stored.project_id.clone(), status, answered_at_ms: now_ms() });
        }
        Ok(submissions)
    }

    async fn submit_one(&self, epoch: &Epoch, stored: &Stored, anchor: &Anchor) -> anyhow::Result<Status> {
        let id = &stored.project_id;
        if self.ledger.contains(epoch.epoch_id, id) {
            tracing::info!("epoch {} {id}: already submitted before a restart; not sent again", epoch.epoch_id);
            return Ok(Status::AlreadyAcknowledged);
        }
        if let Some(ipfs) = &self.ipfs {
            match upload(ipfs, stored).await {
                Ok(()) => {}
                Err(Upload::Mismatch(e)) => {
                    tracing::warn!("epoch {} {id}: not submitted: {e}", epoch.epoch_id);
                    return Ok(Status::NotSubmitted(e));
                }
                Err(Upload::Unavailable(e)) => {
                    tracing::warn!("epoch {}: {e}; submitting the locally computed CID", epoch.epoch_id)
                }
            }
        }
        let (head, header) = latest_block(anchor).await;
        let deadline = head + self.deadline_buffer;
        let request = Request {
            slot_id: self.slot_id,
            deadline,
            snapshot_cid: stored.cid.clone(),
            epoch_id: epoch.epoch_id,
            project_id: id.clone(),
        };
        let signature = self.signer.sign(&request).map_err(anyhow::Error::msg)?;
        let submission = proto::SnapshotSubmission {
            request: Some((&request).into()),
            signature,
            header,
            data_market: self.data_market.clone(),
            node_version: Some(env!("CARGO_PKG_VERSION").into()),
            protocol_state: self.protocol_state.clone(),
        };
        let troubles = &self.status.troubles;
        let metrics = &self.status.metrics;
        let verdict = submit(
            &self.endpoint,
            submission,
            async || anchor.head().await.map(|h| h <= deadline).unwrap_or(true),
            |error: &str| {
                metrics.submission_retries.inc();
                troubles.set(Trouble::Collector, Some(format!("submitting to {} failed: {error}", self.endpoint)));
            },
        )
        .await;
        if !matches!(verdict, Verdict::Unreachable(_)) {
            troubles.set(Trouble::Collector, None);
        }
        if verdict != Verdict::Accepted {
            metrics.submission_failures.inc();
        }
        let status = match verdict {
            Verdict::Accepted => Status::Accepted,
            Verdict::Rejected(r) => Status::Rejected(r),
            Verdict::Unreachable(r) => Status::Missed(r),
        };
        let (epoch_id, cid) = (epoch.epoch_id, &stored.cid);
        match &status {
            Status::Accepted => tracing::info!("epoch {epoch_id} {id}: submission accepted ({cid})"),
            other => tracing::warn!("epoch {epoch_id} {id}: submission {other} ({cid})"),
        }
        if !matches!(status, Status::Missed(_)) {
            // The collector has answered: until the ledger holds it, a restart
            // would send it again, so this waits for the disk (a stop
            // abandons the epoch after its grace).
            let verdict = status.to_string();
            let write =
                || async { self.ledger.record(epoch.epoch_id, epoch.released_block, id, &stored.cid, &verdict) };
            retry(Policy::STATE, "recording a submission in the ledger", write, |_| true).await?;
        }
        Ok(status)
    }
}

/// The anchor's latest block number (for the deadline) and hash (the
/// header), from one call; waits under [`Policy::CHAIN`] while the anchor
/// does not answer (a stop abandons the epoch after its grace).
async fn latest_block(anchor: &Anchor) -> (u64, String) {
    let read = || async move {
        let block = anchor.rpc().call_value("eth_getBlockByNumber", serde_json::json!(["latest", false])).await;
        let block = block.map_err(|e| e.to_string())?;
        let number = quantity(&block["number"]).map_err(|e| format!("the latest block's number: {e}"))?;
        Ok::<_, String>((number, block["hash"].as_str().unwrap_or_default().to_owned()))
    };
    let answer = retry(Policy::CHAIN, "reading the anchor head before submitting", read, |_| true).await;
    answer.expect("retried until it answers")
}

enum Upload {
    /// IPFS could not be reached or refused (the CID is still the content's).
    Unavailable(String),
    /// IPFS stored the bytes under another CID than the node computed.
    Mismatch(String),
}

/// Uploads a stored snapshot's exact bytes and checks the CID IPFS gives them.
async fn upload(ipfs: &Ipfs, stored: &Stored) -> Result<(), Upload> {
    let bytes = tokio::fs::read(&stored.path)
        .await
        .map_err(|e| Upload::Unavailable(format!("reading {}: {e}", stored.path.display())))?;
    let name = stored.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let add = || ipfs.add(bytes.clone(), &name);
    let cid = retry(Policy::IPFS, "IPFS upload", add, |_| true)
        .await
        .map_err(|e| Upload::Unavailable(format!("IPFS upload failed ({e})")))?;
    if cid == stored.cid {
        Ok(())
    } else {
        Err(Upload::Mismatch(format!("IPFS stored the snapshot as {cid}, the node computed {}", stored.cid)))
    }
}
