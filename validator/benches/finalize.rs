//! One epoch of many projects finalized on anvil by three validators
//! (printed, not asserted): each with its own Redis database on a real
//! redis-server and its own key, running the production on-chain worker
//! (`onchain::Onchain`) against the devnet world's ProtocolState. The
//! chosen validator puts the epoch's root on chain, the others attest it,
//! and the pairs are stored in parts sized to the block's gas, each proved
//! against the root (docs/protocol.md §12). Printed: parts, gas (the root,
//! the attestations, the parts; per project), the anchor blocks from the
//! window's close to the root's finalization and to the last pair stored,
//! and the wall time.
//!
//!     cargo bench -p lite-node-validator --bench finalize
//!
//! Without `--bench` (as CI runs it), 50 projects: it only proves it runs.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use lite_node_chain::{Anchor, HttpRpc, IoRuntime, TxSender};
use lite_node_protocol::contracts::{
    FinalizedCidsStored, SnapshotBatchAttestationSubmitted, SnapshotBatchFinalized, SnapshotBatchSubmitted,
    epochBatchCall, storedCidsCall, updateAddressesCall,
};
use lite_node_testkit::{RedisServer, world::World};
use lite_node_validator::{Market, aggregator::Batch, consensus::Finalized, onchain::Onchain};
use redis::AsyncCommands;
use serde_json::{Value, json};

const WINDOW: u64 = 2;
const FALLBACK: u64 = 3;
const EPOCH: u64 = 5;

fn main() {
    let quick = lite_node_testkit::bench_is_quick();
    let projects: u64 = if quick { 50 } else { 10_000 };
    // A block of 30M gas, as on Ethereum (the saved world's anvil has none).
    let world = World::load();
    world.rpc("evm_setBlockGasLimit", json!(["0x1c9c380"]));
    world.mine(1);
    let redis = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let accounts: Vec<_> = world.manifest.accounts[7..10].to_vec();
    let dm: Address = world.manifest.data_market.parse().unwrap();
    world.transact(
        updateAddressesCall {
            dataMarketAddress: dm,
            role: 0,
            addrs: accounts.iter().map(|a| a.address.parse().unwrap()).collect(),
            allowed: vec![true; accounts.len()],
        }
        .abi_encode(),
    );
    world.release_epoch_with_id(EPOCH);
    let io = IoRuntime::new().unwrap();
    let rpc = HttpRpc::new("anchor", vec![world.url()], Duration::from_secs(30), io).unwrap();
    let anchor = Arc::new(Anchor::new(rpc, world.manifest.protocol_state.parse().unwrap(), dm));
    let chain_id = world.manifest.chain_id;

    // The epoch's level-1 batch, as each validator's aggregator leaves it.
    let pairs: BTreeMap<String, Finalized> = (0..projects)
        .map(|i| {
            let project = format!("baseSnapshot:0x{i:040x}:devnet-UNISWAPV3-ETH");
            let cid = lite_node_protocol::cid(format!("epoch {EPOCH} project {i}").as_bytes());
            (project, Finalized { cid, votes: 3, voters: 3 })
        })
        .collect();
    let root = lite_node_validator::consensus::root(&pairs);
    let batch = Batch { epoch_id: EPOCH, projects: pairs, root: root.clone() };
    let stored = json!({
        "epoch_id": EPOCH,
        "batch_cid": batch.cid(),
        "root": root,
        "projects": batch.content()["projects"],
    })
    .to_string();

    let release = world.head();
    let workers: Vec<Onchain> = accounts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            rt.block_on(async {
                let client = redis::Client::open(format!("{}/{}", redis.url(), i + 1)).unwrap();
                let conn = lite_node_validator::connect(&client).await.unwrap();
                let mut market = Market::new(
                    lite_node_protocol::submission::Scope {
                        protocol_state: anchor.protocol_state,
                        data_market: anchor.data_market,
                    },
                    chain_id,
                    format!("validator-{i}"),
                );
                market.window_blocks = WINDOW;
                let market = Arc::new(market);
                let k = &market.keys;
                let mut c = conn.clone();
                let state = [("release_block", release), ("intake_since_at_close", release - 1)];
                let _: () = c.hset_multiple(k.epoch_state(EPOCH), &state).await.unwrap();
                let _: () = c.set(k.finalized(EPOCH), &stored).await.unwrap();
                let _: () = c.zadd(k.onchain_pending(), EPOCH, EPOCH).await.unwrap();
                let key: [u8; 32] = alloy::hex::decode(&a.private_key).unwrap().try_into().unwrap();
                let sender = TxSender::new(anchor.shared_rpc(), &key, chain_id).unwrap();
                Onchain::new(market, conn, anchor.clone(), sender, FALLBACK)
            })
        })
        .collect();
    world.mine(WINDOW + 1);
    let closes = lite_node_validator::window_closes(release, WINDOW);
    let started = std::time::Instant::now();
    let e = U256::from(EPOCH);
    // Rounds of all three until every pair is stored (one block mined
    // between rounds with nothing in flight: the chain's clock).
    loop {
        for w in &workers {
            rt.block_on(w.round()).unwrap();
        }
        let done = rt.block_on(anchor.read(&storedCidsCall { dataMarketAddress: dm, epochId: e }, None)).unwrap();
        if done == U256::from(projects) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1_800), "not stored in 30 minutes ({done} of {projects})");
        world.mine(1);
    }
    let took = started.elapsed();
    let batch_on_chain = rt.block_on(anchor.read(&epochBatchCall { dataMarketAddress: dm, epochId: e }, None)).unwrap();
    assert!(batch_on_chain.finalized && batch_on_chain.root == root.parse::<B256>().unwrap());

    // What each step cost, from the epoch's logs and their receipts.
    let gas_of = |event: B256| -> (u64, u64, Vec<u64>) {
        let logs = rt.block_on(anchor.epoch_logs(event, EPOCH, release)).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        let (mut gas, mut blocks) = (0, Vec::new());
        for log in &logs {
            let hash = log["transactionHash"].as_str().unwrap().to_owned();
            if seen.insert(hash.clone()) {
                let receipt: Value = world.rpc("eth_getTransactionReceipt", json!([hash]));
                gas += u64::from_str_radix(receipt["gasUsed"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            }
            blocks
                .push(u64::from_str_radix(log["blockNumber"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap());
        }
        (seen.len() as u64, gas, blocks)
    };
    let (_, root_gas, _) = gas_of(SnapshotBatchSubmitted::SIGNATURE_HASH);
    let (attestations, attest_gas, _) = gas_of(SnapshotBatchAttestationSubmitted::SIGNATURE_HASH);
    let (_, _, finalized_in) = gas_of(SnapshotBatchFinalized::SIGNATURE_HASH);
    let (parts, parts_gas, part_blocks) = gas_of(FinalizedCidsStored::SIGNATURE_HASH);
    let limit: Value = world.rpc("eth_getBlockByNumber", json!(["latest", false]));
    let finalized_block = finalized_in.first().copied().unwrap_or(0);
    let last_part = part_blocks.iter().max().copied().unwrap_or(0);
    println!(
        "one epoch of {projects} projects from 3 validators on anvil (block gas limit {}):",
        u64::from_str_radix(limit["gasLimit"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    );
    println!(
        "  root: {root_gas} gas (its submitter's attestation); {} more attestation(s): {attest_gas} gas",
        attestations.saturating_sub(1)
    );
    println!("  pairs: {parts} part(s), {parts_gas} gas, {} gas a project", parts_gas / projects.max(1));
    println!(
        "  anchor blocks from the window's close ({closes}): {} to the root's finalization, {} to the last pair stored",
        finalized_block.saturating_sub(closes),
        last_part.saturating_sub(closes)
    );
    println!("  wall time from the close to the last pair stored: {:.1} s", took.as_secs_f64());
}
