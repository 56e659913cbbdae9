//! The machine-readable record of a devnet run (`--json FILE`): everything an
//! observer needs to re-verify it independently — the EIP-712 domain, the
//! active pools, each epoch's seed block hash and total slots, and every
//! submission with its signature, CID, deadline and the exact snapshot bytes.

use serde_json::{Value, json};

use super::{Node, Released, Summary, quantile, validator::EpochOutcome};
use lite_node_compute::{LoadedPackage, snapshots::snapshot_path};

use crate::collector::Seen;
use lite_node_chain::market::Manifest;

/// Everything a run's record is made of.
pub(super) struct Run<'a> {
    /// The market the devnet deployed (the EIP-712 domain is its anchor chain's).
    pub manifest: &'a Manifest,
    pub pools: &'a [String],
    pub package: &'a LoadedPackage,
    pub released: &'a [Released],
    pub seen: &'a [Seen],
    /// What came from nodes the devnet did not start: answered, not counted.
    pub foreign: &'a [Seen],
    pub nodes: &'a [Node],
    pub summary: &'a Summary,
    /// What the validator made of each epoch (empty without one).
    pub outcomes: &'a std::collections::BTreeMap<u64, EpochOutcome>,
    /// Every validator (index, address) and what it made of each epoch.
    pub validators: &'a [(usize, String)],
    pub all_outcomes: &'a [std::collections::BTreeMap<u64, EpochOutcome>],
    /// What the chain made of each epoch.
    pub onchain: &'a std::collections::BTreeMap<u64, super::validator::OnchainOutcome>,
    /// The full node's cluster, with `--full-node-workers`.
    pub full_node: Option<&'a crate::full_node::FullNode>,
    /// `--operators`: their slots and signers (their stand-ins keep no snapshots).
    pub operators: Option<&'a crate::operators::Operators>,
    /// Each validator's and its Redis's peak memory and CPU time.
    pub validator_usage: &'a [Value],
}

pub(super) fn build(run: &Run<'_>) -> Value {
    let Run {
        manifest,
        pools,
        package,
        released,
        seen,
        foreign,
        nodes,
        summary,
        outcomes,
        validators,
        all_outcomes,
        onchain,
        full_node,
        operators,
        validator_usage,
    } = *run;
    let operator_list = operators.map_or(&[][..], |o| &o.list[..]);
    let domain = lite_node_protocol::eip712::domain(manifest.anchor.chain_id, manifest.protocol_state);
    let epochs: Vec<Value> = released
        .iter()
        .map(|e| {
            let a = &e.assignment;
            let outcome = outcomes.get(&a.epoch_id);
            let submissions: Vec<Value> = seen
                .iter()
                .filter_map(|s| s.submission.request.as_ref().map(|r| (s, r)))
                .filter(|(_, r)| r.epoch_id == a.epoch_id)
                .map(|(s, r)| {
                    let node = nodes.iter().find(|n| n.slots.contains(&r.slot_id));
                    // An operator's stand-in signed the full node's bytes: they are the full node's.
                    let operator = operator_list.iter().find(|o| o.slot_id == r.slot_id);
                    let keeper = node.or_else(|| operator.and(nodes.iter().find(|n| n.full_node)));
                    let path =
                        keeper.map(|n| snapshot_path(&n.data_dir.join("snapshots"), r.epoch_id, &r.snapshot_cid));
                    let signer = node.map(|n| n.signer).or(operator.map(|o| o.address));
                    json!({
                        "slotId": r.slot_id,
                        "fullNode": a.full_nodes.contains(&r.slot_id),
                        "signer": signer.map(|s| s.to_string()),
                        "projectId": r.project_id,
                        "snapshotCid": r.snapshot_cid,
                        "signature": s.submission.signature,
                        "deadline": r.deadline,
                        "header": s.submission.header,
                        "snapshotPath": path.map(|p| p.display().to_string()),
                        "verdict": verdict_word(s),
                        "reason": s.verdict.as_ref().err(),
                        "latencyMs": (super::latency_ms(e, s) * 1000.0).round() / 1000.0,
                        "arrivals": s.arrivals,
                        "validatorVerdict": outcome.map(|o| {
                            o.verdicts
                                .get(&(r.slot_id, r.project_id.clone(), r.snapshot_cid.clone()))
                                .cloned()
                                .unwrap_or_else(|| "no verdict".into())
                        }),
                    })
                })
                .collect();
            json!({
                "epochId": a.epoch_id,
                "begin": a.begin,
                "end": a.end,
                "releaseBlock": e.release_block,
                "seedBlockHash": a.block_hash,
                "totalSlots": a.total_slots,
                "selected": a.selected.iter().map(|(s, p)| json!({"slotId": s, "pool": p})).collect::<Vec<_>>(),
                "fullNodes": a.full_nodes,
                "computedBy": full_node.and_then(|f| f.computed.get(&a.epoch_id)),
                "fullNodeGather": full_node.and_then(|f| f.gathered.get(&a.epoch_id)).map(|(ms, n)| json!({
                    "ms": ms,
                    "snapshots": n,
                })),
                "submissions": submissions,
                // Selected slots whose node ended the epoch with nothing sent, and why.
                "endedWithoutSending": e.ended.iter().map(|(s, (why, _))| json!({"slotId": s, "why": why})).collect::<Vec<_>>(),
                "finalized": outcome.map(|o| o.batch.clone()),
                "validators": validators.iter().zip(all_outcomes).map(|((index, address), outcomes)| {
                    let o = outcomes.get(&a.epoch_id);
                    json!({
                        "index": index,
                        "address": address,
                        "batch": o.and_then(|o| o.batch.clone()),
                        "onchain": o.map(|o| &o.onchain),
                    })
                }).collect::<Vec<_>>(),
                "onchain": onchain.get(&a.epoch_id).map(|o| json!({
                    "batchCid": o.batch_cid,
                    "root": o.root,
                    "submitter": o.submitter.to_string(),
                    "finalized": o.finalized,
                    "finalizedBlock": o.finalized_block,
                    "readBack": o.read_back.as_ref().map(|r| json!({"verified": r.verified, "failed": r.failed})),
                    "windowClosesBlock": o.closes,
                    "attestations": o.attestations,
                    "divergent": o.divergent.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "cids": o.cids.iter().map(|(p, (cid, status))| json!({
                        "projectId": p, "snapshotCid": cid, "status": status,
                    })).collect::<Vec<_>>(),
                })),
            })
        })
        .collect();
    let ms = |q| quantile(&summary.latencies_ms, q);
    json!({
        "domain": {
            "name": domain.name,
            "version": domain.version,
            "chainId": manifest.anchor.chain_id,
            "verifyingContract": manifest.protocol_state,
        },
        "dataMarket": manifest.data_market,
        "computePackage": package.package.manifest.commit,
        "pools": pools,
        "nodes": nodes.iter().map(|n| json!({
            "slotId": n.slot_id,
            "slots": n.slots,
            "signer": n.signer.to_string(),
            "dataDir": n.data_dir.display().to_string(),
            "peakRssKiB": n.peak_rss_kib,
            "fullNode": n.full_node,
        })).chain(operator_list.iter().map(|o| json!({
            "slotId": o.slot_id,
            "slots": [o.slot_id],
            "signer": o.address.to_string(),
            "operator": true,
        }))).collect::<Vec<_>>(),
        "operators": operators.map(|o| o.summary()),
        "validatorUsage": validator_usage,
        "fullNode": full_node.map(|f| json!({
            "slotId": f.slot_id,
            "assign": f.assign.name(),
            "workers": f.workers.iter().map(|w| json!({"id": w.id, "restarts": w.restarts, "peakRssKiB": w.process.peak_rss_kib()})).collect::<Vec<_>>(),
            "projects": f.projects,
            "fenced": f.fenced,
        })),
        "epochs": epochs,
        "foreign": foreign.iter().map(|s| {
            let r = s.submission.request.as_ref();
            json!({
                "epochId": r.map(|r| r.epoch_id),
                "slotId": r.map(|r| r.slot_id),
                "projectId": r.map(|r| &r.project_id),
                "snapshotCid": r.map(|r| &r.snapshot_cid),
                "signature": s.submission.signature,
                "verdict": verdict_word(s),
                "reason": s.verdict.as_ref().err(),
                "arrivals": s.arrivals,
            })
        }).collect::<Vec<_>>(),
        "summary": {
            "epochs": summary.epochs,
            "accepted": summary.accepted,
            "rejected": summary.rejected,
            "missing": summary.missing,
            "endedWithoutSending": summary.ended_without_sending,
            "duplicates": summary.duplicates,
            "retransmissions": summary.retransmissions,
            "restarts": summary.restarts,
            "interrupted": summary.interrupted,
            "finalized": summary.finalized,
            "onchainFinalized": summary.onchain_finalized,
            "readBack": summary.read_back.as_ref().map(|r| json!({"verified": r.verified, "failed": r.failed})),
            "latencyMs": {"median": ms(0.5), "p90": ms(0.9), "p99": ms(0.99), "max": ms(1.0)},
        },
    })
}

/// How the collector answered `s`, in a word.
fn verdict_word(s: &Seen) -> &'static str {
    if s.verdict.is_ok() { "accepted" } else { "rejected" }
}

/// A submission from a node the devnet did not start, in a line.
pub(super) fn foreign_line(s: &Seen) -> String {
    let verdict = match &s.verdict {
        Ok(()) => "accepted".to_owned(),
        Err(why) => format!("rejected: {why}"),
    };
    match s.submission.request.as_ref() {
        Some(r) => format!("epoch {} slot {} {} {}: {verdict}", r.epoch_id, r.slot_id, r.project_id, r.snapshot_cid),
        None => format!("a submission without a request: {verdict}"),
    }
}
