//! Canonical JSON of a large snapshot, next to serde_json on the same value.
//!
//! `cargo bench -p lite-node-protocol --bench canonical_json` prints, for a
//! BDS-shaped snapshot of about 1 MB and about 10 MB: our canonicalization
//! (parse + sort + Python-exact print), serde_json's parse + serialization of
//! the same text, and our time per MB (equal per-MB times: linear).

use std::{hint::black_box, time::Instant};

use lite_node_protocol::canonical_json;

/// A snapshot like the BDS base snapshot: per-block maps of decimal strings,
/// nested objects, some non-ASCII text; about `target` bytes.
fn snapshot(target: usize) -> String {
    let mut blocks = Vec::new();
    let mut n = 0u64;
    let mut size = 0;
    while size < target {
        let block = 19_000_000 + n;
        let entry = format!(
            "\"{block}\":{{\"token0Reserves\":\"{}.{}\",\"token1Prices\":\"{}\",\"fee\":{},\"note\":\"pool ünïcode ✓ {n}\",\"ticks\":[{},{},{}]}}",
            n * 7919 % 1_000_003,
            n % 997,
            n as f64 / 3.0,
            if n.is_multiple_of(10) { format!("{}", n as f64 / 7.0) } else { "3000".into() },
            n,
            n * 2,
            n * 3
        );
        size += entry.len() + 1;
        blocks.push(entry);
        n += 1;
    }
    format!(
        "{{\"address\":\"0x88e6a0c2ddd26feeb64f039a2c41296fcb3f5640\",\"epoch\":{{\"begin\":19000000,\"end\":{}}},\"blocks\":{{{}}}}}",
        19_000_000 + n,
        blocks.join(",")
    )
}

/// The best of `runs` timings of `f`, in milliseconds.
fn best_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    println!("{:>8}  {:>14}  {:>22}  {:>10}", "size", "canonical_json", "serde_json parse+print", "ours ms/MB");
    // Without cargo bench's `--bench` (`cargo test --bench '*'`, as CI runs
    // it): one tiny size, a check that the bench still runs.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick { &[16 << 10] } else { &[1 << 20, 10 << 20] };
    if quick {
        println!("quick run (no --bench): a tiny size, the figures below mean nothing");
    }
    for &target in sizes {
        let text = snapshot(target);
        let mb = text.len() as f64 / (1 << 20) as f64;
        let runs = if target > 1 << 20 { 3 } else { 10 };
        let ours = best_ms(runs, || {
            black_box(canonical_json(black_box(&text)).expect("valid JSON"));
        });
        let serde = best_ms(runs, || {
            let value: serde_json::Value = serde_json::from_str(black_box(&text)).expect("valid JSON");
            black_box(serde_json::to_vec(&value).expect("serializes"));
        });
        println!("{:>6.1}MB  {:>11.2} ms  {:>19.2} ms  {:>10.2}", mb, ours, serde, ours / mb);
    }
}
