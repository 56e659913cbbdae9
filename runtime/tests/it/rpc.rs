//! Processors reach the chains through the host: JSON-RPC to a real anvil,
//! single and batched, across the plugin boundary, with failover.

use std::{sync::Arc, time::Duration};

use lite_node::{
    chain::{HttpRpc, IoRuntime},
    compute::host::{RpcEndpoint, RuntimeHost, SelectionTracker},
};
use lite_node_plugin_api::{Chain, Host, RpcCall};
use lite_node_testkit::Anvil;

use crate::support::{epoch, load_faulty};

fn endpoint(urls: &[String], io: &IoRuntime) -> Arc<dyn RpcEndpoint> {
    Arc::new(HttpRpc::new("source", urls.to_vec(), Duration::from_secs(5), io.clone()).unwrap())
}

fn host(source: Option<Arc<dyn RpcEndpoint>>) -> RuntimeHost {
    RuntimeHost::new("rpc", source, None, Arc::new(SelectionTracker::default()), vec![])
}

#[test]
fn a_plugin_calls_anvil_through_the_host_single_and_batched() {
    let anvil = Anvil::start();
    let io = IoRuntime::new().unwrap();
    let runtime_host = host(Some(endpoint(&[anvil.url()], &io)));
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let processor = package.new_processor("faulty", "RpcProcessor", "{}").unwrap();
    let out = processor.compute(&epoch(1), Host::to_ref(&runtime_host)).into_result().unwrap();
    let parts: Vec<&str> = out[0].json.split('|').collect();
    assert_eq!(parts[0], "\"0x7a69\"", "anvil's chain id 31337");
    assert_eq!(parts[1], "ok \"0x0\"", "block number of a fresh anvil");
    assert!(parts[2].starts_with("err rpc error -32601: no_such_method:"), "{}", parts[2]);
}

#[test]
fn calls_fail_over_to_the_next_url_and_report_when_all_fail() {
    let anvil = Anvil::start();
    let io = IoRuntime::new().unwrap();
    let dead = "http://user:hunter2@127.0.0.1:1/v3/apikey42".to_owned();
    let rpc = endpoint(&[dead.clone(), anvil.url()], &io);
    assert_eq!(rpc.call("eth_chainId", "[]").unwrap(), "\"0x7a69\"");
    let calls = [RpcCall { method: "eth_chainId".into(), params_json: "[]".into() }];
    assert_eq!(rpc.batch(&calls).unwrap()[0].as_ref().unwrap(), "\"0x7a69\"");

    let rpc = endpoint(&[dead], &io);
    let err = rpc.call("eth_chainId", "[]").unwrap_err().to_string();
    assert!(err.starts_with("every source RPC endpoint failed (http://127.0.0.1:1/…: "), "{err}");
    assert!(!err.contains("hunter2") && !err.contains("apikey42"), "credentials leaked: {err}");
}

#[test]
fn an_unconfigured_chain_and_bad_params_are_errors_not_panics() {
    let io = IoRuntime::new().unwrap();
    let runtime_host = host(None);
    let h = Host::new(Host::to_ref(&runtime_host));
    let err = h.rpc(Chain::Anchor, "eth_chainId", "[]").unwrap_err().to_string();
    assert_eq!(err, "no Anchor chain endpoint is configured (POWERLOOM_RPC_URL)");
    let rpc = endpoint(&["http://127.0.0.1:1".to_owned()], &io);
    let err = rpc.call("eth_getBalance", "not json").unwrap_err().to_string();
    assert!(err.starts_with("eth_getBalance: params are not JSON"), "{err}");
}

#[test]
fn preloaded_block_details_match_the_chain_and_a_future_block_is_an_error() {
    let world = lite_node_testkit::World::load();
    let io = IoRuntime::new().unwrap();
    let rpc = HttpRpc::new("source", vec![world.url()], Duration::from_secs(5), io).unwrap();
    let head = world.head();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let blocks = rt.block_on(lite_node::epochs::preload::block_details(&rpc, head - 3, head)).unwrap();
    assert_eq!(blocks.iter().map(|b| b.number).collect::<Vec<_>>(), (head - 3..=head).collect::<Vec<_>>());
    for b in &blocks {
        let chain = world.rpc("eth_getBlockByNumber", serde_json::json!([format!("0x{:x}", b.number), false]));
        assert_eq!(b.hash.as_str(), chain["hash"].as_str().unwrap());
        assert_eq!(b.timestamp, lite_node_testkit::world::hex_u64(&chain["timestamp"]));
    }
    let err = rt.block_on(lite_node::epochs::preload::block_details(&rpc, head, head + 1)).unwrap_err();
    assert_eq!(err, format!("the source chain has no block {} yet", head + 1));
}

/// Issue 55, item 4: a first URL that answers but is behind (a provider
/// frozen on an old block) is left for the second, fresh one, once its head
/// is probed — however well it answers — and the lag is shown per endpoint;
/// when the second falls behind in turn, the first is used again.
#[test]
fn an_endpoint_that_answers_but_is_behind_is_left_for_a_fresh_one() {
    let frozen = Anvil::start();
    let fresh = Anvil::start();
    let mine = |anvil: &Anvil, n: u64| {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "anvil_mine", "params": [format!("0x{n:x}")]});
        reqwest::blocking::Client::new().post(anvil.url()).json(&body).send().unwrap();
    };
    mine(&fresh, 50);
    let io = IoRuntime::new().unwrap();
    let rpc = HttpRpc::new("source", vec![frozen.url(), fresh.url()], Duration::from_secs(5), io.clone()).unwrap();
    let endpoints = lite_node_testkit::poll_until("the heads probed", Duration::from_secs(30), || {
        let e = rpc.endpoints();
        e.iter().any(|e| e.left_out).then_some(e)
    });
    assert!(endpoints[0].left_out && endpoints[0].behind >= 50, "{endpoints:?}");
    assert!(!endpoints[1].left_out && endpoints[1].behind == 0, "{endpoints:?}");
    let block = RpcEndpoint::call(&rpc, "eth_blockNumber", "[]").unwrap();
    assert_eq!(block, "\"0x32\"", "the fresh endpoint answers");
    // The first catches up and passes the second: it is used again.
    mine(&frozen, 100);
    lite_node_testkit::poll_until("the first fresh again", Duration::from_secs(30), || {
        let e = rpc.endpoints();
        (!e[0].left_out && e[1].left_out).then_some(())
    });
    assert_eq!(RpcEndpoint::call(&rpc, "eth_blockNumber", "[]").unwrap(), "\"0x64\"");
}
