#!/usr/bin/env bash
# lite-node entry point and local helper.
#
#   ./init.sh         operator start-up (the container's entrypoint): checks that
#                     every required variable is set, fetches/builds the pinned
#                     compute package (a cache hit is instant), runs
#                     `lite-node check`, then `lite-node run`. If a step fails
#                     (other than a configuration error, exit 2), waits a random back-off (between
#                     LITE_NODE_RESTART_BACKOFF_MIN_SECS and _MAX_SECS, 30-300 s)
#                     before exiting, so a restart policy does not hammer the RPCs;
#                     a node killed by a signal (out of memory) ends it at once.
#   ./init.sh devnet [ARGS]  the whole network on this machine: anvil with
#                     Uniswap V3 and ProtocolState, the collector, 4 nodes, 3
#                     validators finalizing on chain, and a consumer reading each
#                     finalized epoch back verified (ARGS go to `lite-node devnet`,
#                     e.g. --epochs 10 --json run.json; --validators 0: none)
#   ./init.sh check   build lite-node, fetch/build the compute package, validate
#                     offline (uses env.example for any variable not already set);
#                     `lite-node check` also reaches the RPCs, slot and collector
#   ./init.sh test    everything CI runs: formatting, lints, all tests, every
#                     benchmark once in quick mode
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CALLER_DIR="$PWD"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-auto}"

say() { printf '\n==> %s\n' "$*"; }

# Every Cargo workspace in the checkout: the runtime's, the compute package a
# data market would publish, and the misbehaving fixture package tests load.
WORKSPACES=(. computes tests/data/fixture-computes protocol/codegen)

need_rust() {
  command -v cargo >/dev/null || { echo "init.sh: cargo not found; install Rust (https://rustup.rs)" >&2; exit 2; }
}

need_devnet_world() {
  command -v npm >/dev/null || { echo "init.sh: npm not found; install Node.js 20+ (apt-get install nodejs npm)" >&2; exit 2; }
  say "devnet world (npm-pinned anvil + Uniswap V3 + ProtocolState)"
  devnet/build-world.sh --if-stale
}

# The validator's tests run real redis-server processes (Debian's package).
need_redis() {
  command -v redis-server >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing redis-server (Debian package, for the validator)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "init.sh: redis-server not found; install it (e.g. sudo apt-get install redis-server)" >&2
    exit 2
  fi
}

# The archive drill uploads to, and restores from, an S3-compatible server
# on loopback: moto's (PyPI, pinned), in a virtualenv of the checkout's.
need_s3_server() {
  [ -x .tools/s3/bin/moto_server ] && return 0
  command -v python3 >/dev/null || { echo "init.sh: python3 not found (the archive drill's S3 server is moto's, from PyPI)" >&2; exit 2; }
  say "installing moto's S3 server (PyPI, into .tools/s3, for the archive drill)"
  python3 -m venv .tools/s3 && .tools/s3/bin/pip install -q "moto[server]==5.2.1" >/dev/null
}

# A cold test run writes about 4 GiB (both workspaces' builds, the compute
# packages the tests build, the devnet world); say so up front rather than
# let a compiler fail half-way with "No space left on device".
check_disk_for_tests() {
  local dir="$CARGO_TARGET_DIR" free_kib need_kib=$((5 * 1024 * 1024))
  while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
  free_kib=$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 { print $4 }')
  [[ "$free_kib" =~ ^[0-9]+$ ]] || return 0
  if [ "$free_kib" -lt "$need_kib" ]; then
    echo "init.sh: warning: $((free_kib / 1024)) MiB free under $dir; a cold test run needs about 5 GiB" >&2
    echo "init.sh: free some space (or point CARGO_TARGET_DIR elsewhere) if the build fails with \"No space left on device\"" >&2
  fi
}

run_tests() {
  need_rust
  check_disk_for_tests
  # A cold CI build keeps no incremental state (it would only be written).
  [ "${CI:-}" = true ] && export CARGO_INCREMENTAL=0
  local logs
  logs=$(mktemp -d)
  need_devnet_world
  # The full node's drills and the cluster benchmark run over 1,000 pools
  # (about 2 minutes to build, once): built beside the lints, waited for
  # before the tests.
  say "devnet 1,000-pool world (building in the background: $logs/world-1000.log)"
  devnet/build-world.sh --pools 1000 --out world-1000 --if-stale >"$logs/world-1000.log" 2>&1 &
  local world_pid=$!
  need_redis
  say "moto's S3 server for the archive drill (in the background: $logs/s3-server.log)"
  need_s3_server >"$logs/s3-server.log" 2>&1 &
  local s3_pid=$!
  # The container drill builds the project's image with podman FROM an
  # offline base (no registry is reachable): podman installed and the base
  # made in the background (~2 min once, mostly I/O), waited for before the
  # tests.
  say "podman and the offline base image (in the background: $logs/container-base.log)"
  devnet/container-base.sh >"$logs/container-base.log" 2>&1 &
  local base_pid=$!
  local ws
  say "formatting (cargo fmt --check)"
  for ws in "${WORKSPACES[@]}"; do (cd "$ws" && cargo fmt --all --check); done

  # Clippy runs as the compiler of each workspace's own crates in the one
  # build that tests them (what `cargo clippy -- -D warnings` does on a check
  # build: clippy-driver as the workspace wrapper, -D warnings in CLIPPY_ARGS).
  # Dependencies are then built once, not once to check and once to test. The
  # wrapper goes in by --config, not the environment, so the cargo builds the
  # tests start (compute packages) do not inherit it.
  local driver
  driver=$(command -v clippy-driver || rustup which clippy-driver 2>/dev/null) || {
    echo "init.sh: clippy-driver not found; install it (rustup component add clippy)" >&2
    exit 2
  }
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  local lint=(--config "build.rustc-workspace-wrapper=\"$driver\"")
  local runner=(cargo test --workspace --locked "${lint[@]}")
  if cargo nextest --version >/dev/null 2>&1; then
    runner=(cargo nextest run --workspace --locked --no-fail-fast "${lint[@]}")
  fi

  # The compute packages' workspaces build in the target dir the runtime
  # builds compute packages in (the one the tests share), in the profile the
  # tests build them in (dev: testkit's compute_build_env), so the tests find
  # their dependencies built. (Beside the runtime's build instead of after
  # it, the two took longer on two cores.)
  (
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/compute-builds"
    say "computes: lints and tests (${runner[*]}, clippy -D warnings as the compiler)"
    (cd computes && cargo test --workspace --locked --no-run --lib --bins --tests --benches "${lint[@]}")
    (cd computes && "${runner[@]}" 2>&1 | tee "$logs/computes.log")
    say "compute package benchmarks, once each in quick mode"
    (cd computes && cargo test --workspace --locked --bench '*' "${lint[@]}")
    say "tests/data/fixture-computes: lints (clippy -D warnings as the compiler)"
    (cd tests/data/fixture-computes && cargo build --workspace --all-targets --locked "${lint[@]}")
    say "compute package: its libraries as a node builds them (the tests' profile)"
    (cd computes && cargo build --lib --workspace --locked)
  )

  # One build of every test and benchmark target (one profile, one cargo
  # graph, clippy linting the workspace's crates as it compiles them), then
  # the tests and the benchmarks from it.
  say "lints and the runtime's test and benchmark build (clippy -D warnings as the compiler)"
  cargo test --workspace --locked --no-run --lib --bins --tests --benches "${lint[@]}"
  if ! wait "$world_pid"; then
    cat "$logs/world-1000.log" >&2
    echo "init.sh: building the 1,000-pool devnet world failed (above)" >&2
    exit 1
  fi
  tail -n 1 "$logs/world-1000.log"
  if ! wait "$base_pid"; then
    cat "$logs/container-base.log" >&2
    echo "init.sh: podman or the offline base image failed (above); the container drill needs them" >&2
    exit 1
  fi
  tail -n 1 "$logs/container-base.log"
  if ! wait "$s3_pid"; then
    cat "$logs/s3-server.log" >&2
    echo "init.sh: installing moto's S3 server failed (above); the archive drill needs it" >&2
    exit 1
  fi

  # Every benchmark once, on tiny sizes and with no timing asserted (a bench
  # binary without cargo bench's --bench flag runs its quick mode), so one
  # that stops compiling or never finishes fails here, not months later.
  # They mostly wait on their devnets, so they run beside the tests; their
  # output is printed after them.
  say "benchmarks, once each in quick mode (cargo test --bench '*'), beside the tests: $logs/benches.log"
  cargo test --workspace --locked --bench '*' "${lint[@]}" >"$logs/benches.log" 2>&1 &
  local benches_pid=$!

  say "runtime tests (${runner[*]})"
  "${runner[@]}" 2>&1 | tee "$logs/runtime.log"

  say "benchmarks (quick mode), as they ran beside the tests"
  if ! wait "$benches_pid"; then
    cat "$logs/benches.log"
    echo "init.sh: a benchmark failed (above)" >&2
    exit 1
  fi
  cat "$logs/benches.log"
  # One closing line over both workspaces' test runs.
  cat "$logs/computes.log" "$logs/runtime.log" | sed -n 's/.* tests\{0,1\} run: //p' | awk -F', ' '
    { for (i = 1; i <= NF; i++) { split($i, w, " "); n[w[2]] += w[1] } }
    END { printf "tests: %d passed, %d failed, %d skipped\n", n["passed"], n["failed"], n["skipped"] }'
  rm -rf "$logs"
}

run_check() {
  need_rust
  say "building lite-node"
  cargo build --release --locked -p lite-node
  local bin="$CARGO_TARGET_DIR/release/lite-node"
  say "fetching and building the compute package"
  "$bin" --env-file env.example compute fetch
  say "checking configuration"
  "$bin" --env-file env.example check --offline
}

run_devnet() {
  need_rust
  need_devnet_world
  # The whole market by default: three validators (each with its own
  # redis-server) finalize every epoch on chain and a consumer reads it back
  # verified; `--validators 0` leaves them out.
  case " $* " in *" --validators"*) ;; *) set -- --validators 3 "$@" ;; esac
  case " $* " in *" --validators 0 "*) ;; *) need_redis ;; esac
  say "building lite-node (release)"
  cargo build --release --locked -p lite-node
  # Compute builds share the test suite's target dir: a second run is a cache hit.
  export LITE_NODE_COMPUTE_TARGET_DIR="${LITE_NODE_COMPUTE_TARGET_DIR:-$CARGO_TARGET_DIR/compute-builds}"
  say "lite-node devnet $*"
  exec "$CARGO_TARGET_DIR/release/lite-node" devnet --devnet-dir "$ROOT/devnet" "$@"
}

# The variables every node needs (runtime/crates/config/src/env.rs REQUIRED; a test
# keeps the two lists equal).
REQUIRED_VARS=(SOURCE_RPC_URL SIGNER_ACCOUNT_ADDRESS SIGNER_ACCOUNT_PRIVATE_KEY SLOT_ID POWERLOOM_RPC_URL
  PROTOCOL_STATE_CONTRACT DATA_MARKET_CONTRACT NAMESPACE POWERLOOM_CHAIN SOURCE_CHAIN)

# Outside a container an operator keeps their market's block in `.env` where
# they start init.sh (as docker compose reads it; LITE_NODE_ENV_FILE names
# another file); in a container the variables come from its environment.
# Variables already set win over the file's, as with `lite-node --env-file`.
env_file() {
  local file="${LITE_NODE_ENV_FILE:-.env}"
  case "$file" in /*) ;; *) file="$CALLER_DIR/$file" ;; esac
  [ -f "$file" ] && echo "$file"
}

# Whether variable $1 is set, in the environment or in the env file.
is_set() {
  local file
  [ -n "${!1:-}" ] && return 0
  file=$(env_file) || return 1
  grep -Eq "^[[:space:]]*(export[[:space:]]+)?$1=[\"']?[^[:space:]\"']" "$file"
}

check_required_env() {
  local missing=() v
  for v in "${REQUIRED_VARS[@]}"; do
    # SLOT_IDS (several slots) stands in for SLOT_ID.
    [ "$v" = SLOT_ID ] && is_set SLOT_IDS && continue
    # An encrypted keystore (with its password file) stands in for the env key.
    [ "$v" = SIGNER_ACCOUNT_PRIVATE_KEY ] && is_set SIGNER_KEYSTORE_FILE && continue
    is_set "$v" || missing+=("$v")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "init.sh: missing required environment variable(s): ${missing[*]}" >&2
    echo "init.sh: set them (see env.example; with docker: --env-file; outside a container: in .env where you start init.sh) and start again" >&2
    exit 2
  fi
}

# The lite-node to run: $LITE_NODE_BIN, else one on PATH (the container's),
# else this checkout's release build (built here if needed).
node_binary() {
  if [ -n "${LITE_NODE_BIN:-}" ]; then
    echo "$LITE_NODE_BIN"
  elif command -v lite-node >/dev/null; then
    command -v lite-node
  else
    need_rust
    say "building lite-node (release)" >&2
    cargo build --release --locked -p lite-node >&2
    echo "$CARGO_TARGET_DIR/release/lite-node"
  fi
}

number_or() { [[ "${1:-}" =~ ^[0-9]+$ ]] && echo "$1" || echo "$2"; }

# Runs "$@" in the background and waits for it, passing SIGTERM/SIGINT on
# (bash as PID 1 would otherwise ignore them); sets CHILD_CODE and SIGNALLED.
run_child() {
  SIGNALLED=0
  "$@" &
  local child=$! code second
  trap 'SIGNALLED=1; kill -TERM "$child" 2>/dev/null || true' TERM INT
  while true; do
    code=0
    wait "$child" || code=$?
    kill -0 "$child" 2>/dev/null && continue
    # A wait cut short by the trap returns 128+signal; the child's own status
    # is still there to collect.
    if [ "$SIGNALLED" = 1 ] && [ "$code" -gt 128 ]; then
      second=0
      wait "$child" 2>/dev/null || second=$?
      [ "$second" -ne 127 ] && code=$second
    fi
    break
  done
  trap - TERM INT
  CHILD_CODE=$code
}

# After a failure (not a configuration error, not an operator's stop), wait a
# random back-off so a restart policy does not hammer the RPCs; then exit. A
# node killed by a signal init.sh did not send (the kernel's out-of-memory
# killer, a kill -9) crashed: nothing says a restart would hammer anything,
# and a container that stayed up with nothing listening would look healthy
# through its start period, so init.sh exits at once.
finish() {
  local code=$1
  if [ "$code" -gt 128 ] && [ "$SIGNALLED" = 0 ]; then
    echo "init.sh: lite-node was killed by signal $((code - 128)) (out of memory? kill -9?); exiting now with code $code so a restart policy starts it again" >&2
    exit "$code"
  fi
  if [ "$code" -ne 0 ] && [ "$code" -ne 2 ] && [ "$SIGNALLED" = 0 ]; then
    local min max pause
    min=$(number_or "${LITE_NODE_RESTART_BACKOFF_MIN_SECS:-}" 30)
    max=$(number_or "${LITE_NODE_RESTART_BACKOFF_MAX_SECS:-}" 300)
    [ "$max" -ge "$min" ] || max=$min
    pause=$((min + RANDOM % (max - min + 1)))
    echo "init.sh: lite-node exited with code $code; waiting ${pause}s before exiting so a restart does not hammer the RPCs" >&2
    trap 'exit "$code"' TERM INT
    sleep "$pause" &
    wait $! || true
  fi
  exit "$code"
}

run_operator() {
  check_required_env
  local bin step file envfile=()
  if file=$(env_file); then
    envfile=(--env-file "$file")
    say "settings from $file (variables already set win)"
  fi
  bin=$(node_binary)
  # The configuration is checked offline (`run --check`: the checks of
  # `lite-node check --offline` on the configuration the node runs with, so
  # an encrypted keystore is opened once): `lite-node run` itself waits for
  # RPCs and a collector that are not up yet (and /health says so).
  for step in "compute fetch" "run --check"; do
    case "$step" in
      "compute fetch") say "compute package" ;;
      "run --check") say "checking configuration, then starting lite-node run" ;;
    esac
    # shellcheck disable=SC2086 # the step is two words on purpose
    run_child "$bin" "${envfile[@]}" $step
    if [ "$CHILD_CODE" -ne 0 ] || [ "$SIGNALLED" = 1 ]; then
      finish "$CHILD_CODE"
    fi
  done
  finish 0
}

case "${1:-}" in
  "") run_operator ;;
  test) run_tests ;;
  check) run_check ;;
  devnet) shift; run_devnet "$@" ;;
  *)
    echo "usage: ./init.sh [devnet [--epochs N --json FILE …] | check | test]" >&2
    exit 2
    ;;
esac
