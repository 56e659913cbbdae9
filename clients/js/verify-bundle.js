#!/usr/bin/env node
// A market's snapshot, read from any server and trusted for nothing it says
// (docs/consumers.md): the JavaScript twin of `lite-node read --epoch N
// --project P`, for consumers whose code is JavaScript. It needs Node.js 20+
// and two npm packages, ethers and @openzeppelin/merkle-tree (the devnet's
// pinned ones are used when run from this repository).
//
//   node clients/js/verify-bundle.js --api URL --epoch N --project P \
//     --rpc ANCHOR_RPC --protocol-state ADDR --data-market ADDR
//
// Prints the snapshot only once every check holds, in order: what was asked;
// the bytes hash to the CID (sha256, CIDv1 raw); they are the protocol's
// canonical JSON; the Merkle proof takes (project, CID) to the root; that
// root is the one ProtocolState finalized for the epoch. Otherwise exits 1
// naming the first check that failed.

"use strict";
const crypto = require("node:crypto");
const path = require("node:path");
const { createRequire } = require("node:module");

// The packages: beside this script's user, or the devnet's pinned ones.
function load(name) {
  try {
    return require(name);
  } catch {
    return createRequire(path.join(__dirname, "../../devnet/package.json"))(name);
  }
}

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || argv[i + 1] === undefined) usage(`unexpected ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ["api", "epoch", "project", "rpc", "protocol-state", "data-market"]) {
    if (!out[k]) usage(`--${k} is missing`);
  }
  if (!/^\d+$/.test(out.epoch)) usage(`--epoch ${out.epoch}: not an epoch number`);
  return out;
}

function usage(why) {
  console.error(`verify-bundle: ${why}\nusage: node verify-bundle.js --api URL --epoch N --project P --rpc URL --protocol-state ADDR --data-market ADDR`);
  process.exit(2);
}

class Failed extends Error {
  constructor(check, why) {
    super(`check \`${check}\` failed: ${why}`);
  }
}

// CIDv1, codec raw (0x55), multihash sha2-256, base32 lower case: `bafkrei…`.
function cidOf(bytes) {
  const digest = crypto.createHash("sha256").update(bytes).digest();
  const raw = Buffer.concat([Buffer.from([0x01, 0x55, 0x12, 0x20]), digest]);
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  let bits = 0, value = 0, out = "b";
  for (const byte of raw) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}

// The protocol's canonical JSON (docs/protocol.md §4): what Python's
// json.dumps(obj, sort_keys=True, separators=(",", ":")) prints. Parsed here
// with numbers kept as written, then printed again; the bytes must be equal.
function canonical(text) {
  let i = 0;
  const fail = (why) => { throw new Error(`${why} at byte ${i}`); };
  const ws = () => { while (" \t\n\r".includes(text[i]) && i < text.length) i++; };
  function value() {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const members = [];
      ws();
      if (text[i] === "}") { i++; return { object: members }; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("a key that is not a string");
        const key = string();
        ws();
        if (text[i++] !== ":") fail("no `:` after a key");
        const v = value();
        const at = members.findIndex(([k]) => k === key);
        if (at >= 0) members.splice(at, 1);
        members.push([key, v]);
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "}") { i++; return { object: members }; }
        fail("no `,` or `}` in an object");
      }
    }
    if (c === "[") {
      i++;
      const items = [];
      ws();
      if (text[i] === "]") { i++; return { array: items }; }
      for (;;) {
        items.push(value());
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "]") { i++; return { array: items }; }
        fail("no `,` or `]` in an array");
      }
    }
    if (c === '"') return { string: string() };
    for (const [word, v] of [["true", { literal: "true" }], ["false", { literal: "false" }], ["null", { literal: "null" }]]) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!m) fail("not a JSON value");
    i += m[0].length;
    // Integers keep every digit, as Python's do (`-0` is 0).
    return m[2] || m[3] ? { float: Number(m[0]) } : { int: BigInt(m[0]).toString() };
  }
  function string() {
    const start = i;
    i++;
    for (;;) {
      if (i >= text.length) fail("an unterminated string");
      if (text[i] === "\\") { i += 2; continue; }
      if (text[i] === '"') { i++; break; }
      i++;
    }
    return JSON.parse(text.slice(start, i));
  }
  const out = print(value());
  ws();
  if (i !== text.length) fail("trailing characters after the JSON value");
  return out;
}

function quote(s) {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20 || (c >= 0x7f && c <= 0xffff)) out += "\\u" + c.toString(16).padStart(4, "0");
    else if (c > 0xffff) {
      const v = c - 0x10000;
      out += "\\u" + (0xd800 + (v >> 10)).toString(16) + "\\u" + (0xdc00 + (v & 0x3ff)).toString(16);
    } else out += ch;
  }
  return out + '"';
}

// Python's repr(float).
function pyFloat(x) {
  if (!Number.isFinite(x)) throw new Error("a number out of range");
  if (Object.is(x, -0)) return "-0.0";
  const [m, e] = Math.abs(x).toExponential().split("e");
  const exp = parseInt(e, 10);
  const digits = m.replace(".", "");
  const sign = x < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= digits.length - 1) return sign + digits + "0".repeat(exp - digits.length + 1) + ".0";
    if (exp >= 0) return sign + digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    return sign + "0." + "0".repeat(-exp - 1) + digits;
  }
  const mantissa = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
  return sign + mantissa + "e" + (exp < 0 ? "-" : "+") + String(Math.abs(exp)).padStart(2, "0");
}

function print(v) {
  if ("literal" in v) return v.literal;
  if ("int" in v) return v.int;
  if ("float" in v) return pyFloat(v.float);
  if ("string" in v) return quote(v.string);
  if ("array" in v) return "[" + v.array.map(print).join(",") + "]";
  const members = [...v.object];
  const numeric = members.length > 0 && members.every(([k]) => /^-?\d+$/.test(k));
  members.sort(([a], [b]) => (numeric ? (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0) : a < b ? -1 : a > b ? 1 : 0));
  return "{" + members.map(([k, x]) => quote(k) + ":" + print(x)).join(",") + "}";
}

async function main() {
  const a = args();
  const { ethers } = load("ethers");
  const { StandardMerkleTree } = load("@openzeppelin/merkle-tree");
  const epoch = BigInt(a.epoch);
  const failures = [];
  for (const server of a.api.split(",").map((s) => s.replace(/\/+$/, ""))) {
    let bundle;
    try {
      const r = await fetch(`${server}/data/${epoch}/${encodeURIComponent(a.project).replace(/%3A/g, ":")}`);
      const body = await r.text();
      if (!r.ok) throw new Error(`${r.status}: ${body.trim()}`);
      bundle = JSON.parse(body);
    } catch (e) {
      failures.push(`${server}: ${e.message}`);
      continue;
    }
    try {
      const same = (x, y) => typeof x === "string" && x.toLowerCase() === y.toLowerCase();
      if (String(bundle.epochId) !== a.epoch || bundle.projectId !== a.project
        || !same(bundle.protocolState, a["protocol-state"]) || !same(bundle.dataMarket, a["data-market"])) {
        throw new Failed("what was asked", `the bundle is epoch ${bundle.epochId} of \`${bundle.projectId}\` in market ${bundle.dataMarket}`);
      }
      if (typeof bundle.snapshot !== "string") throw new Failed("bytes hash to the CID", "the bundle carries no snapshot");
      const bytes = Buffer.from(bundle.snapshot, "utf8");
      const hashed = cidOf(bytes);
      if (hashed !== bundle.cid) throw new Failed("bytes hash to the CID", `the snapshot hashes to ${hashed}, the bundle says ${bundle.cid}`);
      let again;
      try { again = canonical(bundle.snapshot); } catch (e) { throw new Failed("canonical JSON", `the snapshot is not JSON (${e.message})`); }
      if (again !== bundle.snapshot) throw new Failed("canonical JSON", "the snapshot is JSON, not in its canonical form");
      let proved = false;
      try { proved = StandardMerkleTree.verify(bundle.root, ["string", "string"], [a.project, bundle.cid], bundle.proof); } catch { proved = false; }
      if (!proved) throw new Failed("Merkle proof", `the proof does not take (${a.project}, ${bundle.cid}) to root ${bundle.root}`);
      const provider = new ethers.JsonRpcProvider(a.rpc, undefined, { staticNetwork: true });
      const state = new ethers.Contract(a["protocol-state"], [
        "function epochBatch(address dataMarketAddress, uint256 epochId) view returns (string batchCid, bytes32 root, address submitter, bool finalized)",
      ], provider);
      const onChain = await state.epochBatch(a["data-market"], epoch);
      if (!onChain.finalized) {
        console.error(`check \`root finalized on chain\` failed: epoch ${epoch} is not finalized on ProtocolState ${a["protocol-state"]}`);
        process.exit(1);
      }
      if (onChain.root.toLowerCase() !== bundle.root.toLowerCase()) {
        throw new Failed("root finalized on chain", `${server} proves against root ${bundle.root}, ProtocolState finalized epoch ${epoch} with ${onChain.root}`);
      }
      for (const f of failures) console.error(`passed over ${f}`);
      process.stdout.write(bundle.snapshot + "\n");
      console.error(`verified: ${bytes.length} bytes → ${bundle.cid} (sha256, canonical JSON) → proof of ${bundle.proof.length} hashes → root ${bundle.root}, finalized for epoch ${epoch} on ProtocolState ${a["protocol-state"]} (read from ${server})`);
      return;
    } catch (e) {
      if (!(e instanceof Failed)) throw e;
      failures.push(`${server}: ${e.message}`);
    }
  }
  console.error(`no server gave a verified epoch ${epoch} of ${a.project}:\n  ${failures.join("\n  ")}`);
  process.exit(1);
}

if (require.main === module) {
  main().catch((e) => {
    console.error(`verify-bundle: ${e.message}`);
    process.exit(1);
  });
}

module.exports = { cidOf, canonical };
