//! `lite-node read --api URL[,URL…]`: a market's data, read from any server
//! of the market (a validator's API, or anyone's copy) and trusted for
//! nothing it says.
//!
//! - `--epoch N --project P`: one snapshot (its bytes, as a line);
//! - `--epoch N`: every project of the epoch, one bundle with a multiproof;
//! - `--from A --to B [--project P]`: each epoch of a range in turn;
//! - `--follow [--project P]`: each epoch as the market finalizes it, from
//!   `--from` (default: the newest), until stopped.
//!
//! Many snapshots print as NDJSON, `{"epochId", "projectId", "cid",
//! "snapshot"}` a line, the snapshot as the JSON it is. Printed only once
//! every check holds, in order:
//!
//! 1. the answer is about what was asked (this market, epoch and project);
//! 2. the bytes hash to the CID (sha256, CIDv1 raw: the bytes *are* the
//!    block);
//! 3. the bytes are the protocol's canonical JSON;
//! 4. the Merkle proof (a multiproof for a whole epoch) takes (project, CID)
//!    to the root;
//! 5. that root is the one ProtocolState finalized for the epoch (one chain
//!    read an epoch, `epochBatch`).
//!
//! A server that cannot answer (down, an error, not holding the epoch) or
//! whose answer fails a check is passed over for the next `--api`; when none
//! gives an answer that holds, it exits 1 naming each server's failed check.

use std::{collections::BTreeMap, io::Write, time::Duration};

use alloy::primitives::{Address, B256, U256};
use anyhow::{Context, Result, bail};
use lite_node_chain::{
    Chains,
    consumer::{self, Refusal},
};
use lite_node_protocol::{
    bundle::{self, CheckedLine},
    contracts::epochBatchCall,
};

use crate::{config::EnvSnapshot, exit::BadInput};

/// `lite-node read`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The servers to read from (a validator's API), comma-separated: tried
    /// in turn until one's answer holds every check.
    #[arg(long, value_name = "URL,…", value_delimiter = ',', required = true)]
    pub api: Vec<String>,
    /// Epoch id (with --project, one snapshot; alone, every project of it).
    #[arg(long, value_name = "N", conflicts_with_all = ["from", "to", "follow"], required_unless_present_any = ["from", "follow"])]
    pub epoch: Option<u64>,
    /// Project id (default: every project of each epoch read).
    #[arg(long, value_name = "P")]
    pub project: Option<String>,
    /// First epoch of a range (with --to), or where --follow starts.
    #[arg(long, value_name = "N")]
    pub from: Option<u64>,
    /// Last epoch of a range (with --from).
    #[arg(long, value_name = "N", requires = "from", conflicts_with = "follow")]
    pub to: Option<u64>,
    /// Keep reading each epoch as it is finalized, until stopped.
    #[arg(long)]
    pub follow: bool,
    /// Compute the snapshot again here, with the market's pinned compute
    /// package from the source chain (the node's settings: the package,
    /// projects.json, SOURCE_RPC_URL), and check the bytes are the ones
    /// served (with --epoch and --project).
    #[arg(long, requires_all = ["epoch", "project"])]
    pub replay: bool,
    /// The market, and the anchor where the root is checked.
    #[command(flatten)]
    pub market: super::ReaderArgs,
}

/// How long one server has to connect, and between two reads of its answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// How often `--follow` asks for the newest epoch.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Prints what was asked on `out` once checked, and what was checked on
/// stderr.
pub fn run(q: &Args, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    for url in &q.api {
        if reqwest::Url::parse(url).is_err() {
            bail!(BadInput(format!("--api {url}: not a URL (e.g. http://127.0.0.1:9091)")));
        }
    }
    if q.from.is_some() && q.to.is_none() && !q.follow {
        bail!(BadInput("--from needs --to (a range) or --follow".into()));
    }
    if let (Some(from), Some(to)) = (q.from, q.to)
        && from > to
    {
        bail!(BadInput(format!("--from {from} is after --to {to}")));
    }
    let (cfg, protocol_state, data_market) = q.market.resolve(env, "read")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let client = reqwest::Client::builder().connect_timeout(ANSWER_WITHIN).read_timeout(ANSWER_WITHIN).build()?;
    let mut reader = Reader {
        servers: q.api.iter().map(|s| s.trim_end_matches('/').to_owned()).collect(),
        client,
        cfg,
        chains: None,
        protocol_state,
        data_market,
        roots: BTreeMap::new(),
        events: None,
        evented: 0,
    };
    runtime.block_on(async {
        match (q.epoch, q.project.as_deref()) {
            (Some(epoch), Some(project)) => {
                let (checked, server, root) = reader.one(epoch, project).await?;
                if q.replay {
                    // 6. The bytes are what the market's package computes.
                    let cfg = crate::config::ComputeRunConfig::from_env(env)?;
                    let again = super::compute::run::replay(cfg, epoch, project).await?;
                    if again != checked.snapshot.as_bytes() {
                        bail!(
                            "check `replay` failed: the market's compute package computes {} ({} bytes) for {project} \
                             at epoch {epoch}, not the {} ({} bytes) finalized",
                            lite_node_protocol::cid(&again),
                            again.len(),
                            checked.cid,
                            checked.snapshot.len()
                        );
                    }
                    eprintln!("replayed: the market's compute package computes the same {} bytes", again.len());
                }
                out.write_all(checked.snapshot.as_bytes())?;
                writeln!(out)?;
                eprintln!(
                    "verified: {} bytes → {} (sha256, canonical JSON) → proof of {} hashes → root {root}, finalized \
                     for epoch {epoch} on ProtocolState {protocol_state} (read from {server})",
                    checked.snapshot.len(),
                    checked.cid,
                    checked.proof_len,
                );
                Ok(())
            }
            (Some(epoch), None) => reader.print_epoch(epoch, None, out).await,
            (None, project) => {
                let from = match q.from {
                    Some(from) => from,
                    None => reader.newest().await?,
                };
                if let (Some(project), Some(to), false) = (project, q.to, q.follow) {
                    return reader.print_range(project, from, to, out).await;
                }
                let mut epoch = from;
                loop {
                    if q.to.is_some_and(|to| epoch > to) {
                        return Ok(());
                    }
                    if !q.follow {
                        reader.print_epoch(epoch, project, out).await?;
                        epoch += 1;
                        continue;
                    }
                    let last = reader.wait_for(epoch).await;
                    match reader.print_epoch(epoch, project, out).await {
                        Ok(()) => epoch += 1,
                        Err(e) if e.downcast_ref::<NotFinalized>().is_some() => {
                            // A server has it, the chain not (yet): skipped
                            // only once the chain finalized a later epoch.
                            if reader.finalized_on_chain(last).await? {
                                eprintln!(
                                    "epoch {epoch}: the chain did not finalize it (a gap in the market); skipped"
                                );
                                epoch += 1;
                            } else {
                                tokio::time::sleep(FOLLOW_EVERY).await;
                            }
                        }
                        Err(e) => {
                            eprintln!("epoch {epoch}: {e:#}; trying again");
                            tokio::time::sleep(FOLLOW_EVERY).await;
                        }
                    }
                }
            }
        }
    })
}

/// The servers, tried in turn, and the chain's roots read so far.
struct Reader {
    servers: Vec<String>,
    client: reqwest::Client,
    cfg: lite_node_config::ChainConfig,
    chains: Option<Chains>,
    protocol_state: Address,
    data_market: Address,
    /// Epoch → the root ProtocolState finalized (one read an epoch).
    roots: BTreeMap<u64, B256>,
    /// `--follow`'s event stream (`/data/events`) from one server, when open:
    /// told of each finalized epoch as it is, not by polling.
    events: Option<Events>,
    /// The newest epoch an event named.
    evented: u64,
}

/// An open `/data/events` stream.
struct Events {
    response: reqwest::Response,
    pending: Vec<u8>,
}

impl Events {
    /// The next event's id (an epoch id); `None` when the stream ended.
    async fn next_id(&mut self) -> Result<Option<u64>, String> {
        loop {
            if let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.pending.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                if let Some(id) = text.lines().find_map(|l| l.strip_prefix("id:")) {
                    return id.trim().parse().map(Some).map_err(|_| format!("an event id `{}`", id.trim()));
                }
                continue; // a keep-alive comment
            }
            if self.pending.len() > 1 << 20 {
                return Err("an event longer than 1 MiB".into());
            }
            match self.response.chunk().await.map_err(|e| e.to_string())? {
                Some(chunk) => self.pending.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
}

impl Reader {
    fn asked<'a>(&self, epoch_id: u64, project_id: &'a str) -> bundle::Asked<'a> {
        bundle::Asked { epoch_id, project_id, protocol_state: self.protocol_state, data_market: self.data_market }
    }

    /// Check 5's root: the one ProtocolState finalized for `epoch`; an
    /// epoch not finalized on chain is an error (nothing proves anything
    /// yet).
    async fn chain_root(&mut self, epoch: u64, server: &str, root: B256) -> Result<B256> {
        if let Some(root) = self.roots.get(&epoch) {
            return Ok(*root);
        }
        let batch = self.epoch_batch(epoch).await?;
        if !batch.finalized {
            bail!(NotFinalized(format!(
                "check `root finalized on chain` failed: epoch {epoch} of data market {} is not finalized on \
                 ProtocolState {} (so {server}'s root {root} proves nothing yet)",
                self.data_market, self.protocol_state
            )));
        }
        if self.roots.len() >= 1024 {
            self.roots.pop_first();
        }
        self.roots.insert(epoch, batch.root);
        Ok(batch.root)
    }

    /// One project at one epoch: the first server's bundle that holds every
    /// check, with the server and the root.
    async fn one(&mut self, epoch: u64, project: &str) -> Result<(bundle::Checked, String, B256)> {
        let mut failures = Vec::new();
        for server in self.servers.clone() {
            let bundle = match consumer::fetch_bundle(&self.client, &server, epoch, project).await {
                Ok(bundle) => bundle,
                Err(why) => {
                    failures.push(format!("{server}: {why}"));
                    continue;
                }
            };
            let checked = match bundle::check_slice(&bundle, &self.asked(epoch, project)) {
                Ok(Ok(checked)) => checked,
                Ok(Err(failed)) => {
                    failures.push(format!("{server}: {failed}"));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{server}: not a bundle (JSON: {e})"));
                    continue;
                }
            };
            let root = self.chain_root(epoch, &server, checked.root).await?;
            if checked.root != root {
                failures.push(root_refused(&server, checked.root, epoch, root));
                continue;
            }
            passed_over(&failures);
            return Ok((checked, server, root));
        }
        bail!("no server gave a verified epoch {epoch} of {project}:\n  {}", failures.join("\n  "))
    }

    /// Every project of `epoch` (or only `project`), printed as NDJSON once
    /// every check holds.
    async fn print_epoch(&mut self, epoch: u64, project: Option<&str>, out: &mut dyn Write) -> Result<()> {
        let lines = match project {
            Some(project) => {
                let (checked, _, _) = self.one(epoch, project).await?;
                vec![CheckedLine { project_id: project.to_owned(), cid: checked.cid, snapshot: checked.snapshot }]
            }
            None => {
                let (lines, server, root) = self.whole(epoch).await?;
                eprintln!(
                    "verified: epoch {epoch}, {} project(s): bytes → CID (sha256, canonical JSON) → multiproof → root \
                     {root}, finalized on ProtocolState {} (read from {server})",
                    lines.len(),
                    self.protocol_state
                );
                lines
            }
        };
        for line in lines {
            print_line(out, epoch, &line.project_id, &line.cid, &line.snapshot)?;
        }
        out.flush()?;
        Ok(())
    }

    /// `project` over epochs `from..=to`, streamed from the first server
    /// (`/data/range`) and each line checked as it comes, then printed; an
    /// epoch that server does not prove (missing, a failed check, another
    /// root than the chain's) is read from any server on its own
    /// ([`Reader::one`]). Stops at the first epoch no server proves.
    async fn print_range(&mut self, project: &str, from: u64, to: u64, out: &mut dyn Write) -> Result<()> {
        let mut next = from;
        for server in self.servers.clone() {
            if next > to {
                break;
            }
            let mut lines = Vec::new();
            let streamed =
                consumer::read_range(&self.client, &server, project, (next, to), |line| lines.push(line.to_vec()));
            // Lines are kept as they come and checked after: a range's answer
            // is bounded by the range asked.
            if let Err(why) = streamed.await {
                eprintln!("passed over {server} from epoch {next}: {why}");
            }
            for line in lines {
                let epoch = next;
                // A line that holds is epoch `next`'s (its epoch is checked);
                // one that does not is read from any server on its own, if it
                // is that epoch's at all.
                let checked = match bundle::check_slice(&line, &self.asked(epoch, project)) {
                    Ok(Ok(checked)) if self.chain_root(epoch, &server, checked.root).await? == checked.root => checked,
                    _ if bundle::epoch_of(&line) != Some(epoch) => {
                        eprintln!("passed over {server} from epoch {next}: its line is not epoch {next}'s bundle");
                        break;
                    }
                    _ => self.one(epoch, project).await?.0,
                };
                print_line(out, epoch, project, &checked.cid, &checked.snapshot)?;
                next = epoch + 1;
            }
        }
        while next <= to {
            let (checked, _, _) = self.one(next, project).await?;
            print_line(out, next, project, &checked.cid, &checked.snapshot)?;
            next += 1;
        }
        out.flush()?;
        eprintln!("verified: {project}, epochs {from} to {to}: each bundle's bytes → CID → proof → the root on chain");
        Ok(())
    }

    /// Every project of `epoch`: the first server's whole-epoch bundle that
    /// holds every check.
    async fn whole(&mut self, epoch: u64) -> Result<(Vec<CheckedLine>, String, B256)> {
        let mut failures = Vec::new();
        for server in self.servers.clone() {
            let mut lines = Vec::new();
            let asked = self.asked(epoch, "");
            let root = match consumer::read_epoch(&self.client, &server, &asked, |l| lines.push(l)).await {
                Ok(root) => root,
                Err(refusal @ (Refusal::Unanswered(_) | Refusal::Failed(_))) => {
                    failures.push(format!("{server}: {refusal}"));
                    continue;
                }
            };
            let on_chain = self.chain_root(epoch, &server, root).await?;
            if root != on_chain {
                failures.push(root_refused(&server, root, epoch, on_chain));
                continue;
            }
            passed_over(&failures);
            return Ok((lines, server, root));
        }
        bail!("no server gave a verified epoch {epoch}:\n  {}", failures.join("\n  "))
    }

    /// The newest epoch any server has finalized.
    async fn newest(&self) -> Result<u64> {
        let mut failures = Vec::new();
        let mut newest = None;
        for server in &self.servers {
            match self.last_of(server).await {
                Ok(last) => newest = newest.max(Some(last)),
                Err(why) => failures.push(format!("{server}: {why}")),
            }
        }
        newest.with_context(|| format!("no server has finalized an epoch:\n  {}", failures.join("\n  ")))
    }

    async fn last_of(&self, server: &str) -> Result<u64, String> {
        let r = self.client.get(format!("{server}/data/last")).send().await.map_err(|e| e.to_string())?;
        let status = r.status();
        let body = r.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body).trim()));
        }
        let last: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        last["epochId"].as_u64().ok_or_else(|| "/data/last names no epochId".to_owned())
    }

    /// Waits until some server has finalized `epoch` (`--follow`); the
    /// newest epoch known. Told by a server's event stream as each epoch is
    /// finalized (opened on the first server that gives one, again on the
    /// next when it ends), and by asking each server's newest between events
    /// (an epoch one server lacks is another's).
    async fn wait_for(&mut self, epoch: u64) -> u64 {
        loop {
            if self.evented >= epoch {
                return self.evented;
            }
            if self.events.is_none() {
                for server in &self.servers {
                    let url = format!("{server}/data/events");
                    let opened = self.client.get(&url).header("Last-Event-ID", epoch.saturating_sub(1).to_string());
                    if let Ok(response) = opened.send().await
                        && response.status().is_success()
                    {
                        self.events = Some(Events { response, pending: Vec::new() });
                        break;
                    }
                }
            }
            if let Some(events) = &mut self.events {
                match tokio::time::timeout(FOLLOW_EVERY * 4, events.next_id()).await {
                    Ok(Ok(Some(id))) => {
                        self.evented = self.evented.max(id);
                        continue;
                    }
                    Ok(Ok(None) | Err(_)) => self.events = None,
                    Err(_) => {} // quiet: ask the servers below
                }
            }
            for server in &self.servers {
                if let Ok(last) = self.last_of(server).await
                    && last >= epoch
                {
                    return last;
                }
            }
            if self.events.is_none() {
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        }
    }

    /// Whether ProtocolState finalized `epoch` (read now, not cached).
    async fn finalized_on_chain(&mut self, epoch: u64) -> Result<bool> {
        Ok(self.epoch_batch(epoch).await?.finalized)
    }

    /// ProtocolState's `epochBatch` of `epoch` (the anchor connected on the
    /// first read).
    async fn epoch_batch(&mut self, epoch: u64) -> Result<lite_node_protocol::contracts::epochBatchReturn> {
        if self.chains.is_none() {
            self.chains = Some(Chains::connect(&self.cfg).map_err(BadInput)?);
        }
        let anchor = self.chains.as_ref().expect("connected above").anchor()?.clone();
        let call = epochBatchCall { dataMarketAddress: self.data_market, epochId: U256::from(epoch) };
        anchor.read(&call, None).await.context("reading epochBatch from ProtocolState")
    }
}

/// One verified snapshot as an NDJSON line, the snapshot as the JSON it is.
fn print_line(out: &mut dyn Write, epoch: u64, project: &str, cid: &str, snapshot: &str) -> std::io::Result<()> {
    let text = |s: &str| serde_json::to_string(s).expect("a string serializes");
    writeln!(out, r#"{{"epochId":{epoch},"projectId":{},"cid":{},"snapshot":{snapshot}}}"#, text(project), text(cid))
}

/// An epoch the chain has not finalized: nothing proves anything of it yet.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotFinalized(String);

fn root_refused(server: &str, root: B256, epoch: u64, on_chain: B256) -> String {
    format!(
        "{server}: check `root finalized on chain` failed: it proves against root {root}, ProtocolState finalized \
         epoch {epoch} with {on_chain}"
    )
}

fn passed_over(failures: &[String]) {
    for failure in failures {
        eprintln!("passed over {failure}");
    }
}
