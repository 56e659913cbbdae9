//! Rust against the straightforward Python implementation of the same rule
//! (`reference/slot_selection.py`), same sizes: prints both medians and the
//! ratios. `cargo bench -p slot-selection --bench compare_python`.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use slot_selection::assignments;

mod common;
use common::request;

fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let (regular, genesis) = (request(12_345), request(0));
    let _ = assignments(&genesis); // warm up
    // Without cargo bench's `--bench` (`cargo test --bench '*'`, as CI runs
    // it): a few rounds, a check that the comparison still runs.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (regular_runs, genesis_runs) = if quick { (3, 3) } else { (501, 101) };
    let rust_regular = median(regular_runs, || drop(std::hint::black_box(assignments(&regular))));
    let rust_genesis = median(genesis_runs, || drop(std::hint::black_box(assignments(&genesis))));

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/reference/slot_selection.py");
    let out = Command::new("python3").arg(script).arg("--bench").output().expect("python3 runs");
    assert!(out.status.success(), "python reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> f64 {
        let at = text.find(name).expect("field in output") + name.len() + 3;
        text[at..].split([',', '}']).next().unwrap().trim().parse().unwrap()
    };
    let (py_regular, py_genesis) = (field("regular_ms"), field("genesis_ms"));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("T=10000, 100 pools     rust (median)     python (median)   python / rust");
    println!(
        "regular epoch          {:>9.1} µs      {:>9.2} ms      {:>7.0}x",
        ms(rust_regular) * 1e3,
        py_regular,
        py_regular / ms(rust_regular)
    );
    println!(
        "genesis epoch          {:>9.1} µs      {:>9.2} ms      {:>7.0}x",
        ms(rust_genesis) * 1e3,
        py_genesis,
        py_genesis / ms(rust_genesis)
    );
}
