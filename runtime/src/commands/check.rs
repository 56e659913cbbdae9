//! `lite-node check`: everything that can be checked without running, one
//! line per check — the configuration, projects.json and the compute package,
//! then (unless `--offline`) the network: both chains' RPCs and chain ids,
//! ProtocolState, the slot's registered signer, and the collector.

use std::{io::Write, time::Duration};

use anyhow::Result;
use lite_node_protocol::{proto::submission_client::SubmissionClient, quantity};
use serde_json::json;

use crate::{
    chain::{Anchor, HttpRpc, IoRuntime},
    compute,
    config::{ComputeConfig, EnvSnapshot, NodeConfig, ProjectsSource, redact_rpc_url},
    exit::{BadInput, ExitStatus, exit_status},
    node::check_slots,
};

/// `lite-node check`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Skip the network checks (configuration and compute package only).
    #[arg(long)]
    pub offline: bool,
}

/// `lite-node check`: validates everything that can be checked without
/// running, one line per check; fails when any check fails (exit 2 when the
/// configuration is what is wrong, 1 when something cannot be reached).
pub fn run(args: &Args, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    check(args, env, &NodeConfig::from_env(env), out)
}

/// [`run`] on a configuration read already: `lite-node run --check` checks
/// the one it runs with (a keystore is opened once, not twice).
pub fn check(
    args: &Args,
    env: &EnvSnapshot,
    node: &Result<NodeConfig, crate::config::ConfigErrors>,
    out: &mut dyn Write,
) -> Result<()> {
    let offline = args.offline;
    let mut failed = 0usize;
    let mut bad_config = false;
    let mut line = |ok: bool, what: &str, detail: &str, out: &mut dyn Write| -> std::io::Result<()> {
        if !ok {
            failed += 1;
        }
        let detail = detail.replace('\n', "\n      ");
        writeln!(out, "{} {what}: {detail}", if ok { "ok  " } else { "FAIL" })
    };

    match node {
        Ok(cfg) => line(
            true,
            "environment",
            &format!(
                "{} on {}, data market {}",
                slot_list(&cfg.slots.iter().map(|s| s.slot_id).collect::<Vec<_>>()),
                cfg.full_namespace(),
                cfg.data_market
            ),
            out,
        )?,
        Err(e) => {
            bad_config = true;
            line(false, "environment", &e.to_string(), out)?
        }
    }
    let compute_cfg = ComputeConfig::from_env(env);
    let data_dir = compute_cfg.as_ref().map(|c| c.data_dir.clone()).unwrap_or_else(|_| "data".into());
    let projects =
        ProjectsSource::from_env(env).map_err(anyhow::Error::from).and_then(|s| compute::load_projects(&s, &data_dir));
    match &projects {
        Ok(p) => {
            let names: Vec<_> = p.projects.iter().map(|p| p.project_type.as_str()).collect();
            line(true, "projects", &format!("{} project(s): {}", names.len(), names.join(", ")), out)?
        }
        Err(e) => {
            bad_config = true;
            line(false, "projects", &format!("{e:#}"), out)?
        }
    }
    let loaded = match compute_cfg {
        Ok(cfg) => match compute::load(&cfg).map_err(anyhow::Error::from) {
            Ok(loaded) => {
                let m = &loaded.package.manifest;
                let unpinned = match &cfg.source {
                    crate::config::ComputeSource::Bundled(dir) if crate::config::is_build_tree(dir) => format!(
                        "; the computes/ of the checkout this lite-node was built from ({}), which nothing pins: \
                         set SNAPSHOTTER_COMPUTE_REPO, _BRANCH and _COMMIT to the market's",
                        dir.display()
                    ),
                    _ => String::new(),
                };
                line(
                    true,
                    "compute package",
                    &format!(
                        "{} {} ({} {}) at {}{unpinned}",
                        m.source,
                        m.commit,
                        loaded.libraries.len(),
                        if loaded.libraries.len() == 1 { "library" } else { "libraries" },
                        loaded.package.dir.display()
                    ),
                    out,
                )?;
                Some(loaded)
            }
            Err(e) => {
                bad_config |= exit_status(&e) == ExitStatus::BadConfig;
                line(false, "compute package", &format!("{e:#}"), out)?;
                None
            }
        },
        Err(e) => {
            bad_config = true;
            line(false, "compute package", &e.to_string(), out)?;
            None
        }
    };
    // The market's identity (`market env` prints it): other projects or
    // another package would compute what the market's validators refuse.
    match crate::config::MarketIdentity::from_env(env) {
        Ok(market) if market.is_set() => {
            if let Ok(p) = &projects {
                match market.check_projects(&p.identity()) {
                    Ok(()) => line(
                        true,
                        "market's projects",
                        &format!("the market's ({} pool(s), hash {})", p.pools().len(), p.hash),
                        out,
                    )?,
                    Err(e) => {
                        bad_config = true;
                        line(false, "market's projects", &e, out)?
                    }
                }
            }
            if let Some(loaded) = &loaded {
                let commit = &loaded.package.manifest.commit;
                match market.check_compute(commit) {
                    Ok(()) if market.compute_commit.is_some() => {
                        line(true, "market's compute package", &format!("the market's ({commit})"), out)?
                    }
                    Ok(()) => {}
                    Err(e) => {
                        bad_config = true;
                        line(false, "market's compute package", &e, out)?
                    }
                }
            }
        }
        Ok(_) => {}
        Err(e) => {
            bad_config = true;
            line(false, "market's identity", &e.to_string(), out)?
        }
    }
    match (&projects, &loaded) {
        (Ok(projects), Some(loaded)) => {
            for p in &projects.projects {
                let settings = serde_json::Value::Object(p.settings.clone()).to_string();
                let what = format!("processor {}", p.project_type);
                match loaded
                    .new_processor(&p.module, &p.class_name, &settings)
                    .map_err(|e| e.to_string())
                    .and_then(|processor| loaded.check_needs(p).map(|()| processor))
                {
                    Ok(_) => {
                        let lib = loaded.library(&p.module)?;
                        line(
                            true,
                            &what,
                            &format!("{}::{} (plugin-api {})", lib.name, p.class_name, lib.api_version),
                            out,
                        )?
                    }
                    Err(e) => {
                        bad_config = true;
                        line(false, &what, &e, out)?
                    }
                }
            }
        }
        _ => line(false, "processors", "skipped: needs valid projects and a loadable compute package", out)?,
    }
    if let (Ok(cfg), false) = (node, offline) {
        for reached in network(cfg)? {
            bad_config |= !reached.ok && reached.bad_config;
            line(reached.ok, &reached.what, &reached.detail, out)?;
        }
    }
    if failed == 0 {
        return Ok(());
    }
    let summary = format!("{failed} check(s) failed");
    if bad_config { Err(BadInput(summary).into()) } else { Err(anyhow::anyhow!(summary)) }
}

/// One network check's line.
struct Reached {
    ok: bool,
    what: String,
    detail: String,
    /// A failure the operator fixes in the configuration (exit 2).
    bad_config: bool,
}

/// How long each network check may take.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(10);

/// The checks that need the network: each chain answers (with its chain id
/// and head), ProtocolState has code, the slot belongs to the signer, and the
/// collector accepts a connection.
fn network(cfg: &NodeConfig) -> Result<Vec<Reached>> {
    let io = IoRuntime::new()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut lines = Vec::new();
        let mut reached = |ok: bool, what: String, detail: String, bad_config: bool| {
            lines.push(Reached { ok, what, detail, bad_config })
        };
        let rpc = |role, urls: &Vec<reqwest::Url>| HttpRpc::from_urls(role, urls.clone(), NETWORK_TIMEOUT, io.clone());
        let shown =
            |urls: &Vec<reqwest::Url>| urls.iter().map(|u| redact_rpc_url(u.as_str())).collect::<Vec<_>>().join(", ");
        for (role, urls) in [("source", &cfg.source_rpc_urls), ("anchor", &cfg.anchor_rpc_urls)] {
            let what = format!("{role} RPC");
            let answer = async {
                let rpc = rpc(role, urls)?;
                let chain = quantity(&rpc.call_value("eth_chainId", json!([])).await.map_err(|e| e.to_string())?)
                    .map_err(|e| format!("eth_chainId: {e}"))?;
                let head = quantity(&rpc.call_value("eth_blockNumber", json!([])).await.map_err(|e| e.to_string())?)
                    .map_err(|e| format!("eth_blockNumber: {e}"))?;
                Ok::<_, String>((chain, head))
            };
            match answer.await {
                Ok((chain, head)) => {
                    reached(true, what, format!("chain id {chain}, head {head} ({})", shown(urls)), false)
                }
                Err(e) => reached(false, what, format!("{e} ({})", shown(urls)), false),
            }
        }
        let anchor = Anchor::new(
            rpc("anchor", &cfg.anchor_rpc_urls).map_err(anyhow::Error::msg)?,
            cfg.protocol_state,
            cfg.data_market,
        );
        match anchor.rpc().call_value("eth_getCode", json!([cfg.protocol_state, "latest"])).await {
            Ok(code) if code.as_str().is_some_and(|c| c.len() > 2) => {
                reached(true, "ProtocolState".into(), format!("contract at {}", cfg.protocol_state), false)
            }
            Ok(_) => reached(
                false,
                "ProtocolState".into(),
                format!(
                    "no contract at {} on the anchor chain: check PROTOCOL_STATE_CONTRACT and POWERLOOM_RPC_URL",
                    cfg.protocol_state
                ),
                true,
            ),
            Err(e) => reached(false, "ProtocolState".into(), e.to_string(), false),
        }
        let slot = slot_list(&cfg.slots.iter().map(|s| s.slot_id).collect::<Vec<_>>());
        match check_slots(&anchor, &cfg.slots, cfg.skip_foreign_slots).await {
            Ok(Ok(kept)) if kept.len() == 1 && cfg.slots.len() == 1 => reached(
                true,
                slot,
                format!("registered to {} (SIGNER_ACCOUNT_ADDRESS), an enabled snapshotter", kept[0].signer_address),
                false,
            ),
            Ok(Ok(kept)) => reached(
                true,
                slot,
                format!("{} of {} registered to their signers, enabled snapshotters", kept.len(), cfg.slots.len()),
                false,
            ),
            Ok(Err(bad)) => reached(false, slot, bad.to_string(), true),
            Err(e) => reached(false, slot, format!("the anchor did not answer: {e}"), false),
        }
        let endpoint = format!("http://{}:{}", cfg.collector_host, cfg.collector_port);
        let connect = tokio::time::timeout(NETWORK_TIMEOUT, SubmissionClient::connect(endpoint.clone())).await;
        match connect {
            Ok(Ok(_)) => reached(true, "collector".into(), format!("{endpoint} accepts connections"), false),
            Ok(Err(e)) => reached(
                false,
                "collector".into(),
                format!("{endpoint}: {e} (is it running? LOCAL_COLLECTOR_HOST, LOCAL_COLLECTOR_PORT)"),
                false,
            ),
            Err(_) => reached(
                false,
                "collector".into(),
                format!("{endpoint}: no answer in {}s", NETWORK_TIMEOUT.as_secs()),
                false,
            ),
        }
        Ok(lines)
    })
}

/// `slot 7`, or `slots 1-10000` (runs of ids as ranges) with how many.
fn slot_list(ids: &[u64]) -> String {
    match ids {
        [one] => format!("slot {one}"),
        many => format!("{} slots {}", many.len(), lite_node_config::format_slot_ids(many)),
    }
}
