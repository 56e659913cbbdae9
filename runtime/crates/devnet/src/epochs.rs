//! Each epoch: its release ([`Devnet::release`]), the drills due at it, and
//! waiting for what the nodes, the collector and the validators make of it
//! ([`Devnet::settle`]).

use super::*;

impl Devnet {
    /// The `k`-th epoch: a swap, its release, and the drills due after it. A
    /// stalled anvil is waited out (two minutes at most), not a reason to
    /// tear the network down.
    pub(crate) async fn release(&mut self, k: u64) -> Result<Released> {
        // Epoch ids count up by one from the first release.
        if let Some(next) = self.released.last().map(|e| e.assignment.epoch_id + 1) {
            self.drill(|fault, targets| fault.before_release(next, targets));
        }
        // Each validator not cut off listens again (one restarted, or joined
        // again, rejoins the mesh first), so the epoch is one it watches whole.
        for v in self.validators.iter_mut().filter(|v| !v.cut_off) {
            v.wait_listening(Duration::from_secs(30)).await?;
        }
        let drills = self.opts.drilled_slots();
        let (driver, anchor, selection, ours) = (&self.driver, &self.anchor, &self.selection, self.opts.our_slots());
        let operators = self.opts.operator_slots();
        let releaser = &self.releaser;
        let release = retry(
            Policy::CHAIN,
            "the devnet's swap and release",
            || release_one(driver, anchor, selection, releaser, k, (ours, operators.clone()), &drills),
            |_| true,
        );
        let mut epoch = match tokio::time::timeout(STALL_LIMIT, release).await {
            Ok(result) => result?,
            Err(_) => bail!("anvil did not answer for {}s", STALL_LIMIT.as_secs()),
        };
        if let Some(f) = &self.full_node {
            epoch.full_expected = self.pools.len() * f.projects.len();
        }
        for v in self.validators.iter_mut().filter(|v| v.cut_off) {
            v.unwatched.insert(epoch.assignment.epoch_id);
        }
        let epoch_id = epoch.assignment.epoch_id;
        self.released_tx.send_replace(epoch_id);
        self.drill(|fault, targets| fault.after_release(epoch_id, targets));
        let items = self.pools.len();
        let coordinator = self.nodes.iter_mut().find(|n| n.full_node).and_then(|n| n.process.pid());
        if let Some(f) = &mut self.full_node {
            f.after_release(&self.opts.faults, epoch_id, &self.run_dir, items, coordinator);
            if let Some(ops) = &mut self.operators {
                ops.send(&epoch, f.slot_id, f.projects.len(), &self.received, self.opts.epoch_timeout);
            }
        }
        Ok(epoch)
    }

    /// `act` for every `--fault`, on the devnet's parts.
    pub(crate) fn drill(&mut self, act: impl Fn(&Fault, &mut fault::Targets<'_>)) {
        let mut targets = fault::Targets {
            anvils: [&mut self.source_anvil, &mut self.anchor_anvil],
            nodes: &mut self.nodes,
            validators: &mut self.validators,
            switch: &mut self.switch,
        };
        for fault in &self.opts.faults {
            act(fault, &mut targets);
        }
    }

    /// Waits for `epoch`'s submissions (restarting a node that died, at most
    /// `--epoch-timeout-secs`), lets each validator finalize it, prints its
    /// row and keeps it. A stop lets the epoch in flight finish, briefly.
    pub(crate) async fn settle(
        &mut self,
        mut epoch: Released,
        out: &mut dyn Write,
        shutdown: &mut Shutdown,
    ) -> Result<()> {
        let mut deadline = tokio::time::Instant::now() + self.opts.epoch_timeout;
        let mut look_at = tokio::time::Instant::now() + JOURNAL_FIRST_LOOK;
        loop {
            if self.kill_mid_burst(&epoch) {
                // The anchor moves on before the node is back: a message it
                // signed again would carry another deadline and header — a
                // second submission, not the first sent again.
                if let Err(e) = self.driver.call("evm_mine", serde_json::json!([])).await {
                    tracing::warn!("drill: mining a block after the kill failed: {e:#}");
                }
            }
            let owed = epoch.expected.len() + epoch.full_expected;
            let arrived = count_arrived(&self.received, &epoch);
            if arrived >= owed {
                break;
            }
            // A slot whose node ended the epoch without sending is not
            // waited for: its journal says why.
            if tokio::time::Instant::now() >= look_at {
                self.look_at_journals(&mut epoch);
                look_at = tokio::time::Instant::now() + JOURNAL_LOOK_EVERY;
                if arrived + epoch.ended.len() >= owed {
                    break;
                }
            }
            // A node that died is started again on its data dir: it rejoins
            // where its cursor is, and its ledger keeps it from sending twice.
            // A worker a drill killed stays down until the epoch is settled:
            // the others are to finish its items.
            let workers = match &mut self.full_node {
                Some(f) if !f.held() => f.restart_dead_worker(&self.exe, &self.run_dir, MAX_RESTARTS),
                _ => Ok(()),
            };
            if let Err(e) = self.restart_dead_node().and(workers) {
                self.failure = Some(e);
                break;
            }
            if tokio::time::Instant::now() > deadline {
                break;
            }
            if self.interrupted {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            tokio::select! {
                _ = shutdown.as_mut() => {
                    // Let the epoch in flight finish (the nodes are still running), briefly.
                    self.interrupted = true;
                    deadline = deadline.min(tokio::time::Instant::now() + FINISH_GRACE);
                }
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
        if self.failure.is_none() {
            self.failure = self.burst_not_killed(&epoch);
        }
        if self.failure.is_some() {
            self.release_holds();
        }
        for n in &mut self.nodes {
            n.peak_rss_kib = n.process.peak_rss_kib().or(n.peak_rss_kib);
        }
        let e = epoch.assignment.epoch_id;
        let full_slot = self.full_node.as_ref().map(|f| f.slot_id);
        let mut line = row(&epoch, &self.received, self.width, full_slot);
        if let Some(f) = &mut self.full_node {
            let done = arrived(&self.received, &epoch)
                .iter()
                .filter(|s| {
                    s.verdict.is_ok() && s.submission.request.as_ref().is_some_and(|r| Some(r.slot_id) == full_slot)
                })
                .count();
            let by = match f.read_computed(e).await {
                Ok(by) => full_node::describe(by),
                Err(err) => format!("unread: {err:#}"),
            };
            if let Err(e) = f.read_fenced().await {
                tracing::warn!("reading the full node's fence count: {e:#}");
            }
            line.push_str(&format!(
                "\n       full node: {done} of {} pools accepted; computed by {by}",
                epoch.full_expected
            ));
            if let Err(e) = f.restart_dead_worker(&self.exe, &self.run_dir, MAX_RESTARTS) {
                self.failure = Some(e);
            }
        }
        // What the collector accepted is what it published to the validators.
        let forwarded = arrived(&self.received, &epoch).iter().filter(|s| s.verdict.is_ok()).count();
        // Every validator judges what it was sent before the window closes
        // (mined once all have, or their patience ran out): a slow one is
        // not cut off by a fast one.
        for v in self.validators.iter_mut() {
            if let Err(err) = v.restart_if_dead(e, MAX_RESTARTS) {
                self.failure = Some(err);
                break;
            }
            // A validator that died or was cut off this epoch misses what was
            // gossiped meanwhile: it is not waited for.
            let missed = v.restarted_in == Some(e) || v.unwatched.contains(&e);
            let patience = if missed { Duration::from_secs(2) } else { Duration::from_secs(30) };
            match v.wait_judged(e, forwarded, patience).await {
                // Its window is closed all the same: what it judges later is
                // late. Its gossip figures and log say why it was slow.
                Ok(judged) if judged < forwarded && !missed => {
                    let gossip = v.gossip_metrics().await;
                    line.push_str(&format!(
                        "\n       validator {}: {judged} of the {forwarded} submission(s) forwarded judged after {} s; \
                         its gossip: {gossip}; the last lines of its log:\n{}",
                        v.index,
                        patience.as_secs(),
                        v.log_tail(20)
                    ))
                }
                Ok(_) => {}
                Err(err) => {
                    self.failure = Some(err.context(format!("epoch {e} at validator {}", v.index)));
                    break;
                }
            }
        }
        for (v, outcomes) in self.validators.iter_mut().zip(&mut self.outcomes) {
            if self.failure.is_some() {
                break;
            }
            match v.settle(&self.driver, e, epoch.release_block, Duration::from_secs(30)).await {
                Ok(outcome) => {
                    if v.index == 1 {
                        line = with_finalized(line, &outcome);
                    }
                    outcomes.insert(e, outcome);
                }
                Err(err) => {
                    self.failure = Some(err.context(format!("epoch {e} at validator {}", v.index)));
                    break;
                }
            }
        }
        if !self.validators.is_empty() && self.failure.is_none() {
            match validator::settle_onchain(
                &self.driver,
                &self.anchor,
                &mut self.validators,
                e,
                epoch.release_block,
                Duration::from_secs(60),
                self.opts.pairs_on_chain,
            )
            .await
            {
                Ok((mut onchain, states)) => {
                    line = with_onchain(line, &onchain, self.validators.len());
                    if onchain.finalized {
                        let apis: Vec<String> = self.validators.iter().map(|v| v.api.clone()).collect();
                        let scope = lite_node_protocol::submission::Scope {
                            data_market: self.anchor.data_market,
                            protocol_state: self.anchor.protocol_state,
                        };
                        let projects = onchain.cids.keys().cloned().collect();
                        let read = validator::read_back(&apis, scope, e, &onchain.root, projects).await;
                        onchain.read_back = Some(read);
                    }
                    for (outcomes, state) in self.outcomes.iter_mut().zip(states) {
                        if let Some(o) = outcomes.get_mut(&e) {
                            o.onchain = state;
                        }
                    }
                    self.onchain.insert(e, onchain);
                }
                Err(err) => self.failure = Some(err.context(format!("epoch {e} on chain"))),
            }
        }
        writeln!(out, "{line}")?;
        out.flush()?;
        self.released.push(epoch);
        Ok(())
    }

    /// `kill-node-mid-burst`: SIGKILLs the node once the collector has
    /// received any of its submissions of `epoch` (and holds their answers
    /// back), then lets the collector answer again; whether it killed now.
    pub(crate) fn kill_mid_burst(&mut self, epoch: &Released) -> bool {
        let epoch_id = epoch.assignment.epoch_id;
        let mut killed = false;
        for (&(slot, at), (release, power_loss)) in &self.burst_holds {
            if at != epoch_id || *release.borrow() {
                continue;
            }
            let Some(node) = self.nodes.iter_mut().find(|n| n.slots.contains(&slot)) else { continue };
            let expected = epoch.expected.keys().filter(|s| node.slots.contains(s)).count();
            let received = {
                let seen = self.received.lock().unwrap_or_else(|p| p.into_inner());
                let ours = |s: &&collector::Seen| {
                    s.submission
                        .request
                        .as_ref()
                        .is_some_and(|r| r.epoch_id == epoch_id && node.slots.contains(&r.slot_id))
                };
                seen.iter().filter(ours).count()
            };
            if received > 0 {
                tracing::info!(
                    "drill: SIGKILL to node {} mid-burst: {received} of its {expected} submissions of epoch {epoch_id} \
                     received, none answered",
                    node.index
                );
                node.process.kill();
                if *power_loss {
                    match lose_unsynced_lines(&node.data_dir, epoch_id) {
                        Ok(lost) => tracing::info!(
                            "drill: power loss: {lost} `sending` line(s) of epoch {epoch_id} the ledgers had not synced \
                             are gone"
                        ),
                        Err(e) => self.failure = Some(anyhow::anyhow!("drill: taking unsynced ledger lines off: {e}")),
                    }
                }
                release.send_replace(true);
                killed = true;
            }
        }
        killed
    }

    /// The collector answers every node again (a stop, a failure).
    pub(crate) fn release_holds(&self) {
        for (release, _) in self.burst_holds.values() {
            release.send_replace(true);
        }
    }

    /// A `kill-node-mid-burst` drill of `epoch` that never fired (its node
    /// sent nothing in the epoch): the run fails saying so.
    pub(crate) fn burst_not_killed(&self, epoch: &Released) -> Option<anyhow::Error> {
        let epoch_id = epoch.assignment.epoch_id;
        let (&(slot, _), _) =
            self.burst_holds.iter().find(|((_, at), (release, _))| *at == epoch_id && !*release.borrow())?;
        Some(anyhow::anyhow!(
            "--fault kill-node-mid-burst:{slot}@{epoch_id} never fired: the node holding slot {slot} sent nothing in \
             epoch {epoch_id} (none of its slots was selected?)"
        ))
    }

    /// Reads the journal of each expected slot with nothing arrived yet:
    /// one whose node has ended the epoch (a line for each project) sent
    /// nothing more, and `epoch.ended` says why.
    pub(crate) fn look_at_journals(&self, epoch: &mut Released) {
        let answered = arrived_slots(&self.received, epoch);
        let e = epoch.assignment.epoch_id;
        for slot in epoch.expected.keys() {
            if answered.contains(slot) || epoch.ended.contains_key(slot) {
                continue;
            }
            let Some(node) = self.nodes.iter().find(|n| !n.full_node && n.slots.contains(slot)) else { continue };
            let ended = journals::read(&journals::path(&node.data_dir, *slot, node.slots.len() > 1), e);
            if ended.len() >= self.project_count {
                let why = journals::describe(&ended);
                let why = if why.is_empty() { "its node ended the epoch with nothing sent".to_owned() } else { why };
                epoch.ended.insert(*slot, (why, node.index));
            }
        }
    }
}

/// A swap on the source chain (so snapshots have something to show: one
/// block), then the next epoch released by the market's releaser (one
/// source block an epoch, as the devnet's market was deployed).
pub(crate) async fn release_one(
    driver: &Driver,
    anchor: &Anchor,
    selection: &SelectionCheck,
    releaser: &lite_node_chain::releaser::Releaser,
    k: u64,
    (nodes, operators): (u64, std::ops::RangeInclusive<u64>),
    faults: &[(u64, lite_node_config::Drill)],
) -> Result<Released> {
    use lite_node_chain::releaser::Step;
    let pool = (k as usize) % driver.manifest.pools.len();
    driver.swap(pool, k.is_multiple_of(2), u128::from(1 + k % 9) * 10u128.pow(16)).await?;
    let sent_at = SystemTime::now();
    let (epoch_id, begin, end, release_block) = loop {
        match releaser.step().await.map_err(|e| anyhow!("the releaser: {e}"))? {
            Step::Released { epoch_id, begin, end, block } => break (epoch_id, begin, end, block),
            // Another transaction of ours was mined first: the chain says what is next.
            Step::Raced { .. } => continue,
            Step::Waiting => {
                let why = releaser.state.lock().expect("not poisoned").waiting.clone().unwrap_or_default();
                bail!("the releaser has nothing to release after a swap: {why}")
            }
        }
    };
    let release = lite_node_chain::Release { begin, end, block_number: release_block };
    let assignment = selection.epoch(anchor, epoch_id, release).await.map_err(|e| anyhow!("epoch {epoch_id}: {e}"))?;
    // The nodes' slots and the operators' stand-ins'.
    let ours = |s: &u64| *s <= nodes || operators.contains(s);
    let drilled = |s: &u64| faults.iter().any(|(f, _)| f == s);
    let expected =
        assignment.selected.iter().filter(|(s, _)| ours(s) && !drilled(s)).map(|(s, p)| (*s, p.clone())).collect();
    let drills = assignment.selected.keys().filter(|s| ours(s) && drilled(s)).copied().collect();
    Ok(Released { assignment, release_block, sent_at, expected, drills, full_expected: 0, ended: BTreeMap::new() })
}

/// What a power loss takes from a node's ledgers (`lose-power-mid-burst`):
/// the lines since their last sync — every `sending` line of `epoch_id`
/// with no answer after it (an answer is synced, and with it what came
/// before) — and, as the machine comes back on another boot, the boot id
/// the epochs' fixes (`state/epoch-fixes.json`, a list: several epochs may
/// be in flight; `state/epoch-deadline.json`, the newest alone) were made
/// in. How many lines went.
pub(crate) fn lose_unsynced_lines(data_dir: &Path, epoch_id: u64) -> Result<usize> {
    for name in ["state/epoch-fixes.json", "state/epoch-deadline.json"] {
        let fix = data_dir.join(name);
        if let Ok(text) = std::fs::read_to_string(&fix) {
            let mut v: serde_json::Value = serde_json::from_str(&text).context("the epochs' fixes")?;
            match v.as_array_mut() {
                Some(fixes) => fixes.iter_mut().for_each(|f| f["boot_id"] = "a boot before the power loss".into()),
                None => v["boot_id"] = "a boot before the power loss".into(),
            }
            std::fs::write(&fix, v.to_string())?;
        }
    }
    let mut ledgers = vec![data_dir.join("state/submissions.jsonl")];
    if let Ok(slots) = std::fs::read_dir(data_dir.join("slots")) {
        ledgers.extend(slots.flatten().map(|s| s.path().join("state/submissions.jsonl")));
    }
    let mut lost = 0;
    for ledger in ledgers.into_iter().filter(|l| l.is_file()) {
        let text = std::fs::read_to_string(&ledger)?;
        let lines: Vec<serde_json::Value> =
            text.lines().map(serde_json::from_str).collect::<Result<_, _>>().context("a ledger line")?;
        let key = |l: &serde_json::Value| (l["epoch_id"].as_u64(), l["project_id"].as_str().map(str::to_owned));
        let answered: std::collections::BTreeSet<_> =
            lines.iter().filter(|l| l["verdict"] != "sending").map(key).collect();
        let unsynced = |l: &serde_json::Value| {
            l["epoch_id"].as_u64() == Some(epoch_id) && l["verdict"] == "sending" && !answered.contains(&key(l))
        };
        let kept: Vec<String> = lines.iter().filter(|l| !unsynced(l)).map(|l| format!("{l}\n")).collect();
        lost += lines.len() - kept.len();
        std::fs::write(&ledger, kept.concat())?;
    }
    Ok(lost)
}

/// How many submissions the collector has answered for `epoch` so far:
/// asked every few milliseconds while an epoch settles, so it counts under
/// the lock the collector records under, and copies nothing (copying a
/// thousand answers each time took a tenth of the devnet's CPU beside a
/// thousand-slot node, measured).
pub(crate) fn count_arrived(received: &Received, epoch: &Released) -> usize {
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter()
        .filter(|s| !s.foreign)
        .filter(|s| s.submission.request.as_ref().is_some_and(|r| r.epoch_id == epoch.assignment.epoch_id))
        .count()
}

/// The slots the collector has answered for `epoch` so far.
pub(crate) fn arrived_slots(received: &Received, epoch: &Released) -> std::collections::BTreeSet<u64> {
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter()
        .filter(|s| !s.foreign)
        .filter_map(|s| s.submission.request.as_ref())
        .filter(|r| r.epoch_id == epoch.assignment.epoch_id)
        .map(|r| r.slot_id)
        .collect()
}

/// What the collector has answered for `epoch` so far.
pub(crate) fn arrived(received: &Received, epoch: &Released) -> Vec<collector::Seen> {
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter()
        .filter(|s| !s.foreign)
        .filter(|s| s.submission.request.as_ref().is_some_and(|r| r.epoch_id == epoch.assignment.epoch_id))
        .cloned()
        .collect()
}

pub(crate) fn latency_ms(epoch: &Released, seen: &collector::Seen) -> f64 {
    seen.answered_at.duration_since(epoch.sent_at).unwrap_or_default().as_secs_f64() * 1000.0
}
