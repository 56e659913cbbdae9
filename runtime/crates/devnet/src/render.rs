//! What a run prints: the table's header and one row per epoch, and the
//! closing summary ([`Summary`]).

use super::*;

/// The outcome of a devnet run.
#[derive(Debug)]
pub struct Summary {
    pub epochs: usize,
    pub accepted: usize,
    pub rejected: usize,
    /// Selected slots whose submission never arrived.
    pub missing: usize,
    /// Of those, the ones whose node ended the epoch with nothing sent
    /// (a compute that failed or did not report itself selected).
    pub ended_without_sending: usize,
    pub interrupted: bool,
    /// Release → acknowledgement, milliseconds, sorted.
    pub latencies_ms: Vec<f64>,
    /// Peak resident memory per node, KiB.
    pub peak_rss_kib: Vec<(u64, u64)>,
    /// Different submissions accepted for the same slot, epoch and project
    /// (beyond the first): double submissions.
    pub duplicates: usize,
    /// The same bytes sent again (a node whose restart left it without an
    /// answer): one submission each, answered alike — not duplicates.
    pub retransmissions: usize,
    /// Nodes the devnet restarted after they died.
    pub restarts: u32,
    /// With a validator: epochs it finalized; submissions the collector
    /// accepted that the validator rejected, and those it never judged (each
    /// a problem).
    pub finalized: Option<usize>,
    /// How many validators ran: with several, `finalized` and the
    /// disagreements are validator 1's, and said so.
    pub validators: usize,
    pub validator_disagrees: usize,
    pub validator_unjudged: usize,
    /// Gossip submissions the validators' intakes found of no use (stale, an
    /// epoch not released, a slot nobody holds, past a slot's cap), all
    /// validators together: shown beside the unjudged, which they explain.
    pub validator_unwanted: u64,
    /// With validators: epochs the chain finalized.
    pub onchain_finalized: Option<usize>,
    /// Validators the devnet restarted after they died.
    pub validator_restarts: u32,
    /// With validators: every finalized snapshot read back as a consumer
    /// would, and what failed its checks.
    pub read_back: Option<validator::ReadBack>,
}

impl Summary {
    pub fn ok(&self) -> bool {
        self.rejected == 0
            && self.missing == 0
            && self.duplicates == 0
            && self.validator_disagrees == 0
            && self.validator_unjudged == 0
            && self.finalized.is_none_or(|f| f == self.epochs)
            && self.onchain_finalized.is_none_or(|f| f == self.epochs)
            && self.read_back.as_ref().is_none_or(|r| r.failed.is_empty())
            && (self.epochs > 0 || self.interrupted)
    }
}

impl Devnet {
    /// What the devnet is and how it goes on, then the table's header.
    pub(crate) fn header(&self, out: &mut dyn Write) -> Result<()> {
        let opts = &self.opts;
        writeln!(
            out,
            "{} watching the anchor {} (logs in {}); first epoch in {:.1} s, then one every {:.1} s{}\n",
            if opts.slots_per_node > 1 {
                format!("{} nodes of {} slots each", self.nodes.len(), opts.slots_per_node)
            } else {
                format!("{} nodes", self.nodes.len())
            },
            if opts.anchor_ws {
                "over a WebSocket (new heads)".to_owned()
            } else {
                format!("by polling every {} ms", opts.poll_interval.as_millis())
            },
            self.run_dir.display(),
            opts.interval.as_secs_f64(),
            opts.interval.as_secs_f64(),
            if opts.epochs.is_none() { "; Ctrl-C stops" } else { "" }
        )?;
        let width = self.width;
        writeln!(
            out,
            "{:>5}  {:>6}  {:<width$}  {:>8}  {:>8}  {:>10}{}",
            "epoch",
            "block",
            "selected slots → pool",
            "accepted",
            "rejected",
            "latency",
            if self.validators.is_empty() { "" } else { "  finalized (projects, votes, root)" }
        )?;
        out.flush()?;
        Ok(())
    }
}

pub(crate) fn short(address: &str) -> String {
    if address.len() > 12 {
        format!("{}…{}", &address[..6], &address[address.len() - 4..])
    } else {
        address.to_owned()
    }
}

/// Room for every node's "slot→pool" in the table (listed up to 6, counted beyond).
pub(crate) fn selected_width(nodes: u64) -> usize {
    if nodes > 6 { 22 } else { (nodes as usize * 16).max(22) }
}

pub(crate) fn row(epoch: &Released, received: &Received, width: usize, full_slot: Option<u64>) -> String {
    let seen = arrived(received, epoch);
    let accepted = seen.iter().filter(|s| s.verdict.is_ok()).count();
    let rejected = seen.len() - accepted;
    let missing = (epoch.expected.len() + epoch.full_expected).saturating_sub(accepted + rejected);
    let drills = if epoch.drills.len() > 6 {
        format!(" {} drilled", epoch.drills.len())
    } else {
        epoch.drills.iter().map(|s| format!(" {s}→drill")).collect::<String>()
    };
    let selected = if epoch.expected.is_empty() && epoch.drills.is_empty() {
        "none of ours".to_owned()
    } else if epoch.expected.len() > 6 || epoch.drills.len() > 6 {
        format!("{} of our slots", epoch.expected.len()) + &drills
    } else {
        epoch.expected.iter().map(|(s, p)| format!("{s}→{}", short(p))).collect::<Vec<_>>().join(" ") + &drills
    };
    let selected = selected.trim_start().to_owned();
    let slowest = seen
        .iter()
        .filter(|s| full_slot.is_none() || s.submission.request.as_ref().is_some_and(|r| Some(r.slot_id) != full_slot))
        .map(|s| latency_ms(epoch, s))
        .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))));
    let latency = slowest.map_or("-".to_owned(), |l| format!("{l:.0} ms"));
    let mut line = format!(
        "{:>5}  {:>6}  {:<width$}  {:>8}  {:>8}  {:>10}",
        epoch.assignment.epoch_id, epoch.release_block, selected, accepted, rejected, latency
    );
    let ended = epoch.ended.len().min(missing);
    if missing > ended {
        line.push_str(&format!("  ({} not answered in time)", missing - ended));
    }
    // Slots that ended without a submission, by reason (the first few).
    let mut by_reason: BTreeMap<&str, (Vec<u64>, std::collections::BTreeSet<u64>)> = BTreeMap::new();
    for (slot, (why, node)) in &epoch.ended {
        let (slots, nodes) = by_reason.entry(why.as_str()).or_default();
        slots.push(*slot);
        nodes.insert(*node);
    }
    let mut reasons: Vec<_> = by_reason.into_iter().collect();
    reasons.sort_by_key(|(_, (slots, _))| std::cmp::Reverse(slots.len()));
    for (why, (slots, nodes)) in reasons.iter().take(MAX_REASONS) {
        let which = if slots.len() == 1 { "slot" } else { "slots" };
        let logs: Vec<String> = nodes.iter().map(|n| format!("run/node-{n}.log")).collect();
        let logs = match logs.as_slice() {
            [first, .., last] if logs.len() > 3 => format!("{first} … {last}"),
            few => few.join(", "),
        };
        line.push_str(&format!("\n       {which} {}: {why} ({logs})", lite_node_config::format_slot_ids(slots)));
    }
    if reasons.len() > MAX_REASONS {
        line.push_str(&format!("\n       … and {} other reasons (see the nodes' logs)", reasons.len() - MAX_REASONS));
    }
    for s in seen.iter().filter(|s| s.verdict.is_err()) {
        let slot = s.submission.request.as_ref().map_or(0, |r| r.slot_id);
        line.push_str(&format!("\n       rejected slot {slot}: {}", s.verdict.as_ref().unwrap_err()));
    }
    line
}

pub(crate) fn summarize(
    released: &[Released],
    seen: &[collector::Seen],
    nodes: &[Node],
    interrupted: bool,
    full_slot: Option<u64>,
) -> Summary {
    let mut accepted = 0;
    let mut rejected = 0;
    let mut missing = 0;
    let mut ended_without_sending = 0;
    let mut latencies_ms = Vec::new();
    for epoch in released {
        let of_epoch: Vec<&collector::Seen> = seen
            .iter()
            .filter(|s| s.submission.request.as_ref().is_some_and(|r| r.epoch_id == epoch.assignment.epoch_id))
            .collect();
        for s in &of_epoch {
            if s.verdict.is_ok() {
                accepted += 1;
                latencies_ms.push(latency_ms(epoch, s));
            } else {
                rejected += 1;
            }
        }
        if let Some(full) = full_slot {
            let done = of_epoch
                .iter()
                .filter(|s| s.verdict.is_ok() && s.submission.request.as_ref().is_some_and(|r| r.slot_id == full))
                .count();
            missing += epoch.full_expected.saturating_sub(done);
        }
        for slot in epoch.expected.keys() {
            let answered = of_epoch.iter().any(|s| s.submission.request.as_ref().is_some_and(|r| r.slot_id == *slot));
            if !answered {
                missing += 1;
                ended_without_sending += usize::from(epoch.ended.contains_key(slot));
            }
        }
    }
    latencies_ms.sort_by(f64::total_cmp);
    // The same slot, epoch and project accepted twice in different messages:
    // a double submission. (The same bytes again are one `Seen`, counted in
    // its `arrivals`.)
    let mut once = std::collections::BTreeSet::new();
    let duplicates = seen
        .iter()
        .filter(|s| s.verdict.is_ok())
        .filter_map(|s| s.submission.request.as_ref())
        .filter(|r| !once.insert((r.slot_id, r.epoch_id, r.project_id.clone())))
        .count();
    Summary {
        epochs: released.len(),
        accepted,
        rejected,
        missing,
        ended_without_sending,
        interrupted,
        latencies_ms,
        peak_rss_kib: nodes.iter().filter_map(|n| n.peak_rss_kib.map(|r| (n.slot_id, r))).collect(),
        duplicates,
        retransmissions: seen.iter().map(|s| s.arrivals.saturating_sub(1) as usize).sum(),
        restarts: nodes.iter().map(|n| n.restarts).sum(),
        finalized: None,
        validators: 0,
        validator_disagrees: 0,
        validator_unjudged: 0,
        validator_unwanted: 0,
        onchain_finalized: None,
        validator_restarts: 0,
        read_back: None,
    }
}

/// The chain's part of a row: how many validators attested and where the
/// epoch was finalized, counted in anchor blocks after its window closed.
pub(crate) fn with_onchain(mut line: String, o: &validator::OnchainOutcome, validators: usize) -> String {
    match o.finalized_block {
        Some(b) if o.finalized => line.push_str(&format!(
            "  on chain +{} blk, {}/{validators} attested{}",
            b.saturating_sub(o.closes),
            o.attestations,
            if o.divergent.is_empty() { String::new() } else { format!(", {} divergent", o.divergent.len()) }
        )),
        _ => line.push_str(&format!("  NOT finalized on chain ({}/{validators} attested)", o.attestations)),
    }
    line
}

/// The row's finalized column: projects, total votes and the root's start,
/// and each submission the validator rejected, with its reason.
pub(crate) fn with_finalized(mut line: String, outcome: &validator::EpochOutcome) -> String {
    match &outcome.batch {
        Some(b) => {
            let projects = b["projects"].as_array().map_or(0, Vec::len);
            let votes: u64 = b["projects"].as_array().into_iter().flatten().filter_map(|p| p["votes"].as_u64()).sum();
            let root = b["root"].as_str().unwrap_or("");
            line.push_str(&format!("  {projects}p {votes}v {}…", &root[..root.len().min(10)]));
        }
        None => line.push_str("  not finalized in time"),
    }
    // The first few (the rest in the record): an attacker's can be thousands.
    const SHOWN: usize = 5;
    let rejected: Vec<_> = outcome.verdicts.iter().filter(|(_, v)| *v != "accepted").collect();
    if rejected.len() > SHOWN {
        line.push_str(&format!("\n       validator rejected {} submissions; the first {SHOWN}:", rejected.len()));
    }
    for ((slot, project, _), verdict) in rejected.into_iter().take(SHOWN) {
        line.push_str(&format!("\n       validator rejected slot {slot} {project}: {verdict}"));
    }
    line
}

/// The value at quantile `q` of sorted `values` (nearest rank).
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

pub(crate) fn summary_text(s: &Summary, took: Duration) -> String {
    let ms = |q| quantile(&s.latencies_ms, q).map_or("-".to_owned(), |v| format!("{v:.0} ms"));
    let rss = s
        .peak_rss_kib
        .iter()
        .map(|(_, r)| *r)
        .max()
        .map_or("-".to_owned(), |r| format!("{:.1} MiB", r as f64 / 1024.0));
    let mut extra = match (s.duplicates, s.restarts) {
        (0, 0) => String::new(),
        (d, r) => format!(", {d} duplicate(s), {r} node restart(s)"),
    };
    if s.ended_without_sending > 0 {
        extra = format!(
            " ({} of them ended in their node with nothing sent: the table says why){extra}",
            s.ended_without_sending
        );
    }
    if s.retransmissions > 0 {
        extra.push_str(&format!(
            ", {} message(s) sent again unchanged (answered alike, not duplicates)",
            s.retransmissions
        ));
    }
    if let Some(f) = s.finalized {
        let who = if s.validators > 1 { "validator 1" } else { "the validator" };
        extra.push_str(&format!("; {who} finalized {f} of {} epochs", s.epochs));
        if s.validator_disagrees > 0 {
            extra.push_str(&format!("; it rejected {} submission(s) the collector accepted", s.validator_disagrees));
        }
        if s.validator_unjudged > 0 {
            extra.push_str(&format!(
                "; {} submission(s) the collector accepted were never judged by it",
                s.validator_unjudged
            ));
        }
        if s.validator_unwanted > 0 {
            extra.push_str(&format!(
                "; the validators' gossip intakes found {} submission(s) of no use",
                s.validator_unwanted
            ));
        }
    }
    if let Some(f) = s.onchain_finalized {
        extra.push_str(&format!("; the chain finalized {f} of {} epochs", s.epochs));
        if s.validator_restarts > 0 {
            extra.push_str(&format!(", {} validator restart(s)", s.validator_restarts));
        }
    }
    if let Some(r) = &s.read_back {
        extra.push_str(&format!(
            "; a consumer read back {} finalized snapshot(s), each verified (bytes → CID → multiproof → the root on \
             chain; each epoch as one bundle)",
            r.verified
        ));
        if let Some(first) = r.failed.first() {
            extra.push_str(&format!(", {} epoch(s) failed (the first: {first})", r.failed.len()));
        }
    }
    format!(
        "{} epochs in {:.0} s{}: {} accepted, {} rejected, {} missing{extra}\n\
         release → acknowledgement: median {}, p90 {}, p99 {}, max {}\n\
         peak RSS of a node: {rss}",
        s.epochs,
        took.as_secs_f64(),
        if s.interrupted { " (interrupted)" } else { "" },
        s.accepted,
        s.rejected,
        s.missing,
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(1.0),
    )
}

#[cfg(test)]
mod tests {
    use lite_node_protocol::proto::{Request, SnapshotSubmission};

    use super::*;

    const POOL: &str = "0x88e6a0c2ddd26feeb64f039a2c41296fcb3f5640";

    fn released(expected: &[u64], drills: &[u64], ended: &[(u64, &str, u64)]) -> Released {
        Released {
            assignment: Arc::new(EpochAssignment {
                epoch_id: 7,
                begin: 100,
                end: 101,
                block_hash: "0x00".into(),
                total_slots: 4,
                selected: expected.iter().map(|s| (*s, POOL.to_owned())).collect(),
                full_nodes: Default::default(),
            }),
            release_block: 42,
            sent_at: SystemTime::UNIX_EPOCH,
            expected: expected.iter().map(|s| (*s, POOL.to_owned())).collect(),
            drills: drills.to_vec(),
            full_expected: 0,
            ended: ended.iter().map(|(slot, why, node)| (*slot, ((*why).to_owned(), *node))).collect(),
        }
    }

    fn seen(slot_id: u64, epoch_id: u64, verdict: Result<(), String>, after_ms: u64) -> collector::Seen {
        collector::Seen {
            submission: SnapshotSubmission {
                request: Some(Request { slot_id, epoch_id, ..Default::default() }),
                ..Default::default()
            },
            verdict,
            reason: None,
            answered_at: SystemTime::UNIX_EPOCH + Duration::from_millis(after_ms),
            foreign: false,
            arrivals: 1,
        }
    }

    #[test]
    fn a_row_counts_this_epochs_verdicts_names_pools_short_and_the_slowest_latency() {
        let received: Received = Arc::default();
        received.lock().unwrap().extend([
            seen(1, 7, Ok(()), 30),
            seen(2, 7, Err("deadline passed".into()), 55),
            seen(1, 6, Ok(()), 999),
        ]);
        let line = row(&released(&[1, 2], &[], &[]), &received, 20, None);
        let first = line.lines().next().unwrap();
        assert_eq!(first, "    7      42  1→0x88e6…5640 2→0x88e6…5640         1         1       55 ms");
        assert!(line.contains("\n       rejected slot 2: deadline passed"), "{line}");
        assert!(!line.contains("999"), "another epoch's submission is not this row's: {line}");
    }

    #[test]
    fn a_row_says_who_was_not_answered_and_why_slots_ended_without_sending() {
        let received: Received = Arc::default();
        let epoch =
            released(&[1, 2, 3], &[4], &[(2, "the compute failed: boom", 2), (3, "the compute failed: boom", 3)]);
        let line = row(&epoch, &received, 10, None);
        assert!(line.lines().next().unwrap().contains("4→drill"), "{line}");
        assert!(line.contains("(1 not answered in time)"), "three missing, two ended: {line}");
        assert!(line.contains("slots 2-3: the compute failed: boom (run/node-2.log, run/node-3.log)"), "{line}");
        let none = row(&released(&[], &[], &[]), &received, 12, None);
        assert!(none.contains("none of ours"), "{none}");
        assert!(none.trim_end().ends_with('-'), "no latency without a submission: {none}");
    }

    fn summary() -> Summary {
        Summary {
            epochs: 10,
            accepted: 40,
            rejected: 0,
            missing: 0,
            ended_without_sending: 0,
            interrupted: false,
            latencies_ms: vec![30.0, 31.0, 47.0, 55.0],
            peak_rss_kib: vec![(1, 15_462), (2, 14_000)],
            duplicates: 0,
            retransmissions: 0,
            restarts: 0,
            finalized: None,
            validators: 1,
            validator_disagrees: 0,
            validator_unjudged: 0,
            validator_unwanted: 0,
            onchain_finalized: None,
            validator_restarts: 0,
            read_back: None,
        }
    }

    #[test]
    fn the_summary_gives_counts_quantiles_and_the_largest_node() {
        let s = summary();
        assert!(s.ok());
        assert_eq!(
            summary_text(&s, Duration::from_secs(20)),
            "10 epochs in 20 s: 40 accepted, 0 rejected, 0 missing\n\
             release → acknowledgement: median 31 ms, p90 55 ms, p99 55 ms, max 55 ms\n\
             peak RSS of a node: 15.1 MiB"
        );
    }

    #[test]
    fn the_summary_names_each_problem_and_a_problem_fails_the_run() {
        let s = Summary {
            missing: 2,
            ended_without_sending: 1,
            duplicates: 1,
            restarts: 1,
            finalized: Some(9),
            validator_unjudged: 3,
            validator_unwanted: 0,
            onchain_finalized: Some(10),
            validator_restarts: 1,
            interrupted: true,
            ..summary()
        };
        assert!(!s.ok());
        let text = summary_text(&s, Duration::from_secs(5));
        for part in [
            "10 epochs in 5 s (interrupted)",
            "2 missing (1 of them ended in their node with nothing sent: the table says why), 1 duplicate(s), 1 node restart(s)",
            "the validator finalized 9 of 10 epochs",
            "3 submission(s) the collector accepted were never judged by it",
            "the chain finalized 10 of 10 epochs, 1 validator restart(s)",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(!Summary { epochs: 0, ..summary() }.ok(), "a run of no epoch is no success");
    }
}
