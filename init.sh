#!/usr/bin/env bash
# lite-node entry point and local helper.
#
#   ./init.sh devnet [ARGS]  the whole network on this machine: anvil with
#                     Uniswap V3 and ProtocolState, the collector, 4 nodes
#                     (ARGS go to `lite-node devnet`, e.g. --epochs 10 --json run.json)
#   ./init.sh check   build lite-node, fetch/build the compute package, validate
#                     (uses env.example for any variable not already set)
#   ./init.sh test    everything CI runs: formatting, lints, all tests
#
# Operator start-up (no arguments) comes with the container work; see README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-auto}"

say() { printf '\n==> %s\n' "$*"; }

# Every Cargo workspace in the checkout: the runtime's, the compute package a
# data market would publish, and the misbehaving fixture package tests load.
WORKSPACES=(. computes tests/data/fixture-computes)

need_rust() {
  command -v cargo >/dev/null || { echo "init.sh: cargo not found; install Rust (https://rustup.rs)" >&2; exit 2; }
}

need_devnet_world() {
  command -v npm >/dev/null || { echo "init.sh: npm not found; install Node.js 20+ (apt-get install nodejs npm)" >&2; exit 2; }
  say "devnet world (npm-pinned anvil + Uniswap V3 + ProtocolState)"
  devnet/build-world.sh --if-stale
}

run_tests() {
  need_rust
  need_devnet_world
  local ws
  say "formatting (cargo fmt --check)"
  for ws in "${WORKSPACES[@]}"; do (cd "$ws" && cargo fmt --all --check); done

  say "lints (cargo clippy -D warnings)"
  for ws in "${WORKSPACES[@]}"; do
    (cd "$ws" && cargo clippy --workspace --all-targets --locked -- -D warnings)
  done

  local runner=(cargo test --workspace --locked)
  if cargo nextest --version >/dev/null 2>&1; then
    runner=(cargo nextest run --workspace --locked --no-fail-fast)
  fi
  say "compute package tests (${runner[*]})"
  (cd computes && "${runner[@]}")
  say "runtime tests (${runner[*]})"
  "${runner[@]}"
}

run_check() {
  need_rust
  say "building lite-node"
  cargo build --release --locked -p lite-node
  local bin="$CARGO_TARGET_DIR/release/lite-node"
  say "fetching and building the compute package"
  "$bin" --env-file env.example compute fetch
  say "checking configuration"
  "$bin" --env-file env.example check
}

run_devnet() {
  need_rust
  need_devnet_world
  say "building lite-node (release)"
  cargo build --release --locked -p lite-node
  # Compute builds share the test suite's target dir: a second run is a cache hit.
  export LITE_NODE_COMPUTE_TARGET_DIR="${LITE_NODE_COMPUTE_TARGET_DIR:-$CARGO_TARGET_DIR/compute-builds}"
  say "lite-node devnet $*"
  exec "$CARGO_TARGET_DIR/release/lite-node" devnet --devnet-dir "$ROOT/devnet" "$@"
}

case "${1:-}" in
  test) run_tests ;;
  check) run_check ;;
  devnet) shift; run_devnet "$@" ;;
  *)
    echo "usage: ./init.sh devnet [--epochs N --json FILE …] | check | test" >&2
    exit 2
    ;;
esac
