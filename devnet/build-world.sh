#!/usr/bin/env bash
# Builds the local network's saved world: installs the pinned tooling, compiles
# ProtocolState, deploys onto a fresh anvil, and saves anvil's state.
#
#   devnet/build-world.sh [--pools N] [--slots N] [--out DIR] [--if-stale]
#
# Output: DIR/state.json (anvil --load-state) and DIR/manifest.json
# (addresses, accounts, pools). Default DIR: devnet/world.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

POOLS=5 SLOTS=4 OUT=world IF_STALE=false
while [ $# -gt 0 ]; do
  case "$1" in
    --pools) POOLS=$2; shift 2 ;;
    --slots) SLOTS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --if-stale) IF_STALE=true; shift ;;
    *) echo "build-world.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ ! -x node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil ] || [ package-lock.json -nt node_modules ]; then
  echo "devnet: installing pinned tooling (npm ci)"
  npm ci --no-audit --no-fund
fi

if $IF_STALE && [ -f "$OUT/state.json" ] && [ -f "$OUT/manifest.json" ]; then
  fresh=true
  for input in ../contracts/out/ProtocolStateDrills.json build-world.js package-lock.json build-world.sh; do
    [ "$input" -nt "$OUT/state.json" ] && fresh=false
  done
  grep -q "\"pools\"" "$OUT/manifest.json" || fresh=false
  have=$(node -e "const m=require('./$OUT/manifest.json');console.log(m.pools.length+' '+m.slots.length)")
  [ "$have" = "$POOLS $SLOTS" ] || fresh=false
  if $fresh; then echo "devnet: world in $OUT is up to date ($POOLS pools, $SLOTS slots)"; exit 0; fi
fi

mkdir -p "$OUT"
rm -f "$OUT/state.json.tmp" "$OUT/anvil.log"
ANVIL=node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil
# anvil spills historical states under $HOME/.foundry; give it a throwaway
# HOME, and keep no history (the saved world needs only the final state).
ANVIL_HOME=$(mktemp -d)
# The log exists before anvil starts: on a loaded machine the background
# shell may not have opened it yet when it is first read.
: >"$OUT/anvil.log"
HOME="$ANVIL_HOME" "$ANVIL" --host 127.0.0.1 --port 0 --timestamp 1700000000 --prune-history --disable-block-gas-limit \
  --dump-state "$OUT/state.json.tmp" >"$OUT/anvil.log" 2>&1 &
ANVIL_PID=$!
trap 'kill $ANVIL_PID 2>/dev/null || true; rm -rf "$ANVIL_HOME"' EXIT
PORT=""
# Up to a minute: a loaded machine starts anvil slowly.
for _ in $(seq 1 3000); do
  PORT=$(sed -n 's/^Listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/anvil.log" 2>/dev/null || true)
  [ -n "$PORT" ] && break
  kill -0 "$ANVIL_PID" 2>/dev/null || { echo "devnet: anvil died:" >&2; cat "$OUT/anvil.log" >&2; exit 1; }
  sleep 0.02
done
[ -n "$PORT" ] || { echo "devnet: anvil did not report its port" >&2; exit 1; }
node build-world.js --rpc "http://127.0.0.1:$PORT" --pools "$POOLS" --slots "$SLOTS" --out "$OUT/manifest.json"
# anvil writes --dump-state when it stops.
kill -TERM "$ANVIL_PID"
wait "$ANVIL_PID" 2>/dev/null || true
trap - EXIT
rm -rf "$ANVIL_HOME"
[ -s "$OUT/state.json.tmp" ] || { echo "devnet: anvil wrote no state" >&2; exit 1; }
mv "$OUT/state.json.tmp" "$OUT/state.json"
rm -f "$OUT/anvil.log"
echo "devnet: saved $OUT/state.json ($(du -h "$OUT/state.json" | cut -f1))"
