//! The end of a run: a node that died restarted, everything stopped in
//! order, and the [`Summary`] made ([`Devnet::stop`]).

use super::*;

impl Devnet {
    /// Starts again a node whose process ended; an error once one has been
    /// restarted [`MAX_RESTARTS`] times.
    pub(crate) fn restart_dead_node(&mut self) -> Result<()> {
        let dead = self.nodes.iter_mut().find_map(|n| {
            let status = n.process.exited()?;
            Some((n, status))
        });
        let Some((node, status)) = dead else { return Ok(()) };
        process::refuse_after(
            &format!("node {}", node.index),
            node.restarts,
            MAX_RESTARTS,
            &status.to_string(),
            &node.process,
        )?;
        tracing::warn!("node {} exited ({status}); restarting it", node.index);
        node.restarts += 1;
        let log = node.process.log.clone();
        node.process = Node::spawn(&self.exe, node.index, &node.env, &log)?;
        Ok(())
    }

    /// Stops the children without a summary (a start that failed; anvil
    /// stops when it is dropped).
    pub(crate) fn stop_quietly(&mut self) {
        self.release_holds();
        tokio::task::block_in_place(|| {
            let mut procs: Vec<&mut Guarded> = self.nodes.iter_mut().map(|n| &mut n.process).collect();
            stop_all(&mut procs, NODE_STOP_GRACE + STOP_MARGIN);
        });
        self.serving.abort();
        if let Some(f) = &mut self.full_node {
            tokio::task::block_in_place(|| f.stop(NODE_STOP_GRACE + STOP_MARGIN));
        }
        for v in &mut self.validators {
            tokio::task::block_in_place(|| stop_all(&mut [&mut v.process, &mut v.redis], Duration::from_secs(10)));
        }
    }

    /// Stops everything (nodes first, orderly; then the collector, the
    /// validators and anvil), prints the summary, writes the record, and
    /// returns the summary — or the failure that ended the run.
    pub(crate) async fn stop(mut self, out: &mut dyn Write) -> Result<Summary> {
        self.release_holds();
        for n in &mut self.nodes {
            n.peak_rss_kib = n.process.peak_rss_kib().or(n.peak_rss_kib);
        }
        tokio::task::block_in_place(|| {
            let mut procs: Vec<&mut Guarded> = self.nodes.iter_mut().map(|n| &mut n.process).collect();
            stop_all(&mut procs, NODE_STOP_GRACE + STOP_MARGIN);
        });
        if let Some(f) = &mut self.full_node {
            if let Err(e) = f.read_fenced().await {
                tracing::warn!("reading the full node's fence count: {e:#}");
            }
            tokio::task::block_in_place(|| f.stop(NODE_STOP_GRACE + STOP_MARGIN));
            f.read_gathered(&self.run_dir);
        }
        // Each validator's gossip figures, read while every peer is still up.
        let mut gossip = Vec::new();
        for v in &mut self.validators {
            gossip.push(v.gossip_metrics().await);
        }
        if let Some(ops) = &mut self.operators {
            ops.stop().await;
            writeln!(out, "{}", ops.describe())?;
        }
        if let Some(h) = &mut self.hostile {
            writeln!(out, "{}", h.describe().await)?;
            h.stop().await;
        }
        let _ = self.stop_collector.send(());
        // A client someone else left connected must not keep the devnet from ending.
        if tokio::time::timeout(Duration::from_secs(2), &mut self.serving).await.is_err() {
            tracing::info!("a client stayed connected to the collector; closing it");
            self.serving.abort();
        }
        // What each validator's gossip intake found of no use (stale, an
        // epoch not released, a slot nobody holds, past a slot's cap): read
        // before its Redis stops, compared below with what went unjudged.
        let mut unwanted = Vec::new();
        for v in &mut self.validators {
            unwanted.push((v.index, v.unwanted().await));
        }
        // What each validator (and its Redis) took of the machine over the run.
        let mut usage: Vec<serde_json::Value> = Vec::new();
        // What each validator's API serves now, of every epoch the chain
        // finalized (a restarted one's store survived its SIGKILL).
        let finalized: Vec<(u64, String)> =
            self.onchain.iter().filter(|(_, o)| o.finalized).map(|(e, o)| (*e, o.root.clone())).collect();
        let scope = lite_node_protocol::submission::Scope {
            data_market: self.anchor.data_market,
            protocol_state: self.anchor.protocol_state,
        };
        for (v, gossip) in self.validators.iter_mut().zip(gossip) {
            let mut u = v.usage();
            u["gossip"] = gossip;
            writeln!(out, "validator {}: {}", v.index, validator::usage_line(&u))?;
            let served = validator::serves(&v.api, scope, &finalized).await;
            let refused: Vec<String> = served.refused.iter().map(|(e, why)| format!("epoch {e}: {why}")).collect();
            writeln!(
                out,
                "validator {}: serves {} of the {} epochs the chain finalized, each whole and verified{}",
                v.index,
                served.verified.len(),
                finalized.len(),
                if refused.is_empty() { String::new() } else { format!(" (not: {})", refused.join("; ")) }
            )?;
            u["serves"] = serde_json::json!({
                "verified": served.verified,
                "refused": served.refused.iter().map(|(e, why)| serde_json::json!({"epochId": e, "why": why})).collect::<Vec<_>>(),
            });
            usage.push(u);
        }
        for v in &mut self.validators {
            tokio::task::block_in_place(|| stop_all(&mut [&mut v.process, &mut v.redis], Duration::from_secs(10)));
        }
        tokio::task::block_in_place(|| {
            self.anchor_anvil.stop();
            self.source_anvil.stop();
        });

        let (foreign, seen): (Vec<_>, Vec<_>) =
            self.received.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().partition(|s| s.foreign);
        if !foreign.is_empty() {
            writeln!(
                out,
                "{} submission(s) came from nodes this devnet did not start (another slot or signer); answered, \
                 not counted:",
                foreign.len()
            )?;
            const SHOWN: usize = 20;
            for s in foreign.iter().take(SHOWN) {
                writeln!(out, "  {}", record::foreign_line(s))?;
            }
            if foreign.len() > SHOWN {
                writeln!(out, "  … and {} more (all in the --json record's `foreign`)", foreign.len() - SHOWN)?;
            }
        }
        let full_slot = self.full_node.as_ref().map(|f| f.slot_id);
        let mut summary = summarize(&self.released, &seen, &self.nodes, self.interrupted, full_slot);
        summary.restarts += self.full_node.as_ref().map_or(0, full_node::FullNode::restarts);
        if let Some(f) = &self.full_node {
            writeln!(
                out,
                "full node: {} worker restart(s); {} late result(s) refused by the fence",
                f.restarts(),
                f.fenced
            )?;
        }
        // Each validator's finalizations and disagreements; the first's are
        // the table's and the record's.
        let empty = BTreeMap::new();
        let outcomes = self.outcomes.first().unwrap_or(&empty);
        if !self.validators.is_empty() {
            summary.finalized = Some(outcomes.values().filter(|o| o.batch.is_some()).count());
            summary.validators = self.validators.len();
            summary.onchain_finalized = Some(self.onchain.values().filter(|o| o.finalized).count());
            let mut read = validator::ReadBack::default();
            for r in self.onchain.values().filter_map(|o| o.read_back.as_ref()) {
                read.verified += r.verified;
                read.failed.extend(r.failed.iter().cloned());
            }
            summary.read_back = Some(read);
            summary.validator_restarts = self.validators.iter().map(|v| v.restarts).sum();
            let verdicts: Vec<Option<&str>> = seen
                .iter()
                .filter(|s| s.verdict.is_ok())
                .filter_map(|s| s.submission.request.as_ref())
                .map(|r| {
                    let key = (r.slot_id, r.project_id.clone(), r.snapshot_cid.clone());
                    outcomes.get(&r.epoch_id).and_then(|o| o.verdicts.get(&key)).map(String::as_str)
                })
                .collect();
            summary.validator_disagrees = verdicts.iter().filter(|v| v.is_some_and(|v| v != "accepted")).count();
            summary.validator_unjudged = verdicts.iter().filter(|v| v.is_none()).count();
            for (index, by_why) in unwanted.iter().filter(|(_, w)| !w.is_empty()) {
                let list: Vec<String> = by_why.iter().map(|(why, n)| format!("{n} {why}")).collect();
                writeln!(out, "validator {index}: its gossip intake found submissions of no use: {}", list.join(", "))?;
                summary.validator_unwanted += by_why.values().sum::<u64>();
            }
        }
        writeln!(out, "\n{}", summary_text(&summary, self.started.elapsed()))?;
        if let Some(path) = &self.opts.json {
            let record = record::build(&record::Run {
                manifest: &self.market,
                pools: &self.pools,
                package: &self.package,
                released: &self.released,
                seen: &seen,
                foreign: &foreign,
                nodes: &self.nodes,
                summary: &summary,
                outcomes,
                validators: &self.validators.iter().map(|v| (v.index, v.address.to_string())).collect::<Vec<_>>(),
                all_outcomes: &self.outcomes,
                onchain: &self.onchain,
                full_node: self.full_node.as_ref(),
                operators: self.operators.as_ref(),
                validator_usage: &usage,
            });
            let text = serde_json::to_vec_pretty(&record)?;
            lite_node_core::atomic_file::write(path, &text)?;
            writeln!(out, "record written to {}", path.display())?;
        }
        if let Some(e) = self.failure {
            return Err(e);
        }
        Ok(summary)
    }
}
