#!/usr/bin/env node
// Re-verifies a `lite-node devnet --json FILE` record without the node's code:
// every submission's EIP-712 signature (ethers), its snapshot bytes against the
// CID (sha256 + CIDv1 raw, base32 written out here), and the slot selection
// (docs/protocol.md §2, reimplemented here from the text) — that each accepted
// submission's slot was selected for that epoch and pool, that every selected
// slot of the run's nodes was accepted, and that nothing was rejected.
// A full node (docs/protocol.md §13: a slot the chain lists in the epoch's
// `fullNodes`) is held to its own rule instead: each of its submissions names
// an active pool and is marked `fullNode`, and it covers every active pool of
// each of its projects exactly once per epoch.
// With validators (`--validators N`), also each validator's level-1 batch of each
// epoch (docs/protocol.md §11, reimplemented here): that it accepted every
// submission the collector accepted, and — from those submissions alone — each
// project's winning CID and votes, the Merkle root over the pairs (with
// OpenZeppelin's own @openzeppelin/merkle-tree), and the batch's CID; then the
// root more than half of the validators hold, and that the chain finalized
// exactly that root and, per project, that CID (docs/protocol.md §12).
//
//   node devnet/verify-record.js run.json
//
// Each (slot, epoch, project) has at most one accepted submission: a message
// the collector saw again byte for byte is one entry (its `arrivals`); two
// different ones accepted are a double submission.
//
// Exit 0: all holds. Exit 1: each problem is printed.
'use strict';
const fs = require('fs');
const crypto = require('crypto');
const { ethers } = require('ethers');
const { StandardMerkleTree } = require('@openzeppelin/merkle-tree');
// The curve library ethers itself signs and recovers with.
const { secp256k1 } = require('@noble/curves/secp256k1');
const { invert } = require('@noble/curves/abstract/modular');
const { wNAF } = require('@noble/curves/abstract/curve');

const SLOTS_PER_EPOCH = 1000n;

function sha256(...parts) {
  const h = crypto.createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
}
function be(n, bytes) {
  const b = Buffer.alloc(bytes);
  let v = BigInt(n);
  for (let i = bytes - 1; i >= 0; i--) { b[i] = Number(v & 0xffn); v >>= 8n; }
  return b;
}
const u64 = (buf) => buf.readBigUInt64BE(0);

// Selected slots of an epoch and their pools (regular epochs; genesis is not used by the devnet).
function selection(blockHash, epochId, totalSlots, pools) {
  const seed = sha256(Buffer.from(blockHash.replace(/^0x/, ''), 'hex'), be(epochId, 8));
  const total = BigInt(totalSlots);
  const items = [];
  for (let s = 1n; s <= total; s++) items.push(s);
  const k = total < SLOTS_PER_EPOCH ? total : SLOTS_PER_EPOCH;
  for (let i = 0n; i < k; i++) {
    const r = sha256(seed, be(i, 4));
    const j = i + (u64(r) % (total - i));
    [items[Number(i)], items[Number(j)]] = [items[Number(j)], items[Number(i)]];
  }
  // Python's sorted() on strings: code-point order, which for ASCII is JS's default sort.
  const sorted = [...pools].sort();
  const out = new Map();
  for (const slot of items.slice(0, Number(k))) {
    const h = sha256(seed, be(slot, 4));
    out.set(Number(slot), sorted[Number(u64(h) % BigInt(sorted.length))]);
  }
  return out;
}

function base32(bytes) {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  let bits = 0, value = 0, out = '';
  for (const byte of bytes) {
    value = (value << 8) | byte; bits += 8;
    while (bits >= 5) { out += alphabet[(value >>> (bits - 5)) & 31]; bits -= 5; }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}
// CIDv1, raw codec (0x55), sha2-256 multihash (0x12, 32 bytes), base32 with the `b` prefix.
/**
 * The address `sig` over `digest` recovers to, where `signer` is the one it
 * should be. The first signature of each signer is recovered in full (ethers);
 * after that, the signer's public key Q is known, and recovering to it is the
 * same as R = (z/s)·G + (r/s)·Q having x = r and the parity v names (the
 * recovery formula Q = (s·R − z·G)/r, solved for R): two multiplications by
 * fixed points, with tables built once per key, instead of a recovery each.
 * On a mismatch the full recovery names the address it does recover to.
 */
const keys = new Map();
// k·P with the GLV split k = k1 + k2·λ (both halves under 2^128; P·k2·λ is
// (β·x, y) of P·k2) and a window table of P for 128-bit scalars, left
// projective: R's is the one inversion.
const halves = wNAF(secp256k1.ProjectivePoint, 128);
const tables = new Map();
function times(P, k) {
  if (!tables.has(P)) tables.set(P, halves.precomputeWindow(P, 8));
  const table = tables.get(P);
  const { beta, splitScalar } = secp256k1.CURVE.endo;
  const { k1neg, k1, k2neg, k2 } = splitScalar(k);
  let [a, b] = [halves.wNAF(8, table, k1).p, halves.wNAF(8, table, k2).p];
  if (k1neg) a = a.negate();
  if (k2neg) b = b.negate();
  return a.add(new secp256k1.ProjectivePoint(secp256k1.CURVE.Fp.mul(b.px, beta), b.py, b.pz));
}
function recoveredSigner(digest, sig, signer) {
  const Q = keys.get(signer);
  if (Q) {
    const { n } = secp256k1.CURVE;
    const [z, r, s] = [BigInt(digest) % n, BigInt(sig.r), BigInt(sig.s)];
    if (r > 0n && r < n && s > 0n && s < n) {
      const w = invert(s, n);
      const [u1, u2] = [(z * w) % n, (r * w) % n];
      const R = times(Q, u2).add(times(secp256k1.ProjectivePoint.BASE, u1));
      if (!R.equals(secp256k1.ProjectivePoint.ZERO)) {
        const { x, y } = R.toAffine();
        if (x === r && Number(y & 1n) === sig.yParity) return signer;
      }
    }
  }
  const recovered = ethers.recoverAddress(digest, sig).toLowerCase();
  if (!Q && recovered === signer) {
    const point = secp256k1.ProjectivePoint.fromHex(ethers.SigningKey.recoverPublicKey(digest, sig).slice(2));
    keys.set(signer, point);
  }
  return recovered;
}

const cidOf = (bytes) => 'b' + base32(Buffer.concat([Buffer.from([0x01, 0x55, 0x12, 0x20]), sha256(bytes)]));

// The validator's level-1 batch of an epoch, from the submissions it accepted:
// one vote per slot and project, the most-voted CID (ties: the smallest), the
// root sha256 over `projectId:cid,` sorted by project id, and the CID of the
// canonical JSON of {epochId, projects: [{projectId, snapshotCid, votes}], root}.
function batchOf(epochId, submissions) {
  const ballots = new Map();
  for (const s of submissions) {
    if (!ballots.has(s.projectId)) ballots.set(s.projectId, new Map());
    const bySlot = ballots.get(s.projectId);
    if (!bySlot.has(s.slotId)) bySlot.set(s.slotId, s.snapshotCid);
  }
  const projects = [];
  for (const projectId of [...ballots.keys()].sort()) {
    const counts = new Map();
    for (const cid of ballots.get(projectId).values()) counts.set(cid, (counts.get(cid) || 0) + 1);
    let best = null;
    for (const [cid, votes] of counts) {
      if (!best || votes > best.votes || (votes === best.votes && cid < best.snapshotCid)) best = { snapshotCid: cid, votes };
    }
    projects.push({ projectId, snapshotCid: best.snapshotCid, votes: best.votes });
  }
  // Project ids in byte order (ASCII: JS's default sort); no leaves: keccak256("").
  const root = projects.length === 0
    ? ethers.keccak256('0x')
    : StandardMerkleTree.of(projects.map((p) => [p.projectId, p.snapshotCid]), ['string', 'string'], { sortLeaves: false }).root;
  const content = JSON.stringify({ epochId, projects, root });
  return { projects, root, batchCid: cidOf(Buffer.from(content)) };
}

// One validator's batch (`theirs`) against the one recomputed from what the
// collector accepted.
function checkBatch(where, theirs, mine, problems) {
  const got = (theirs.projects || []).map((p) => `${p.projectId}=${p.snapshotCid}×${p.votes}`).join(' ');
  const want = mine.projects.map((p) => `${p.projectId}=${p.snapshotCid}×${p.votes}`).join(' ');
  if (got !== want) problems.push(`${where}: finalized ${got || '(nothing)'}, recomputed ${want || '(nothing)'}`);
  if (theirs.root !== mine.root) problems.push(`${where}: root ${theirs.root}, recomputed ${mine.root}`);
  if (theirs.batch_cid !== mine.batchCid) problems.push(`${where}: batch CID ${theirs.batch_cid}, recomputed ${mine.batchCid}`);
}

function checkFinalized(e, problems) {
  const where = `epoch ${e.epochId} (validator)`;
  if (!e.finalized) { problems.push(`${where}: no finalized batch`); return 0; }
  for (const s of e.submissions) {
    if (s.verdict === 'accepted' && s.validatorVerdict !== 'accepted') {
      problems.push(`${where}: slot ${s.slotId} ${s.projectId}: the collector accepted it, the validator says ${s.validatorVerdict}`);
    }
  }
  const mine = batchOf(e.epochId, e.submissions.filter((s) => s.validatorVerdict === 'accepted'));
  checkBatch(where, e.finalized, mine, problems);
  if (e.validators && e.onchain !== undefined) checkOnchain(e, mine, problems);
  return mine.projects.length;
}

// Every validator's batch, the majority root, and what the chain finalized.
// A validator that did not act on chain for the epoch — it says it did not
// watch it whole (`skipped`: it was down or cut off), or has no on-chain state
// for it (it was down) — is not held to the batch and does not count.
function checkOnchain(e, honest, problems) {
  const n = e.validators.length;
  const roots = new Map();
  for (const v of e.validators) {
    const where = `epoch ${e.epochId} (validator ${v.index})`;
    const status = v.onchain && v.onchain.onchain_status;
    if (!status || status === 'skipped' || status === 'not_run') continue;
    if (!v.batch) { problems.push(`${where}: no level-1 batch`); continue; }
    checkBatch(where, v.batch, honest, problems);
    roots.set(v.batch.root, (roots.get(v.batch.root) || 0) + 1);
  }
  const where = `epoch ${e.epochId} (chain)`;
  const majority = [...roots].find(([, count]) => count * 2 > n);
  const c = e.onchain;
  if (!majority) { problems.push(`${where}: no root is held by more than half of the ${n} validators`); return; }
  if (!c || !c.finalized) { problems.push(`${where}: not finalized on chain`); return; }
  if (c.root !== majority[0]) problems.push(`${where}: the chain finalized root ${c.root}, the validators' majority holds ${majority[0]}`);
  if (majority[0] !== honest.root) problems.push(`${where}: the majority's root ${majority[0]} is not the recomputed ${honest.root}`);
  if (c.finalizedBlock == null) problems.push(`${where}: no SnapshotBatchFinalized event`);
  const onChain = new Map((c.cids || []).map((p) => [p.projectId, p]));
  for (const p of honest.projects) {
    const got = onChain.get(p.projectId);
    if (!got || got.snapshotCid !== p.snapshotCid || got.status !== 1) {
      problems.push(`${where}: ${p.projectId}: the chain has ${got ? `${got.snapshotCid} (status ${got.status})` : 'nothing'}, the recomputed batch ${p.snapshotCid}`);
    }
  }
  if (c.attestations < Math.floor(n / 2) + 1) problems.push(`${where}: ${c.attestations} attestations of ${n} validators`);
  // A consumer read every finalized snapshot back (bytes → CID → proof → the
  // root on chain): as many as the recomputed batch holds, none failed.
  const read = c.readBack;
  if (!read) problems.push(`${where}: no consumer read-back`);
  else if (read.failed.length || read.verified !== honest.projects.length) {
    problems.push(`${where}: a consumer read back ${read.verified} of ${honest.projects.length} snapshots${read.failed.length ? ` (${read.failed[0]})` : ''}`);
  }
}

function main() {
  const file = process.argv[2];
  if (!file) { console.error('usage: node verify-record.js RECORD.json'); process.exit(2); }
  const record = JSON.parse(fs.readFileSync(file, 'utf8'));
  const problems = [];
  const d = record.domain;
  const domain = { name: d.name, version: d.version, chainId: d.chainId, verifyingContract: d.verifyingContract };
  const types = { EIPRequest: [
    { name: 'slotId', type: 'uint256' }, { name: 'deadline', type: 'uint256' },
    { name: 'snapshotCid', type: 'string' }, { name: 'epochId', type: 'uint256' },
    { name: 'projectId', type: 'string' },
  ] };
  // The EIP-712 digest (what ethers.TypedDataEncoder.hash computes), its
  // encoder and domain separator made once.
  const encoder = ethers.TypedDataEncoder.from(types);
  const separator = ethers.TypedDataEncoder.hashDomain(domain);
  const digestOf = (value) => ethers.keccak256(ethers.concat(['0x1901', separator, encoder.hash(value)]));
  // Every slot of every node (a node may work several: `slots`), with its node's signer.
  const signers = new Map(record.nodes.flatMap((n) => (n.slots || [n.slotId]).map((slot) => [slot, n.signer.toLowerCase()])));
  const activePools = new Set(record.pools.map((p) => p.toLowerCase()));
  let checked = 0;
  let finalized = 0;
  const explained = [];
  const withValidator = record.epochs.some((e) => 'finalized' in e && e.finalized !== undefined && e.finalized !== null) || record.summary.finalized != null;
  for (const e of record.epochs) {
    if (withValidator) { checkFinalized(e, problems); finalized++; }
    const where = `epoch ${e.epochId}`;
    if (e.epochId === 0) { problems.push(`${where}: genesis selection is not re-checked here`); continue; }
    const selected = selection(e.seedBlockHash, e.epochId, e.totalSlots, record.pools);
    const listed = new Map(e.selected.map((s) => [s.slotId, s.pool]));
    if (listed.size !== selected.size || [...selected].some(([s, p]) => listed.get(s) !== p)) {
      problems.push(`${where}: the record's selection differs from the recomputed one`);
    }
    const fullNodes = new Set(e.fullNodes || []);
    const acceptedOnce = new Map();
    for (const s of e.submissions.filter((s) => s.verdict === 'accepted')) {
      const key = `${s.slotId} ${s.projectId}`;
      acceptedOnce.set(key, (acceptedOnce.get(key) || 0) + 1);
    }
    for (const [key, n] of acceptedOnce) {
      if (n > 1) problems.push(`${where} slot ${key}: ${n} different submissions accepted (a double submission)`);
    }
    for (const s of e.submissions) {
      const at = `${where} slot ${s.slotId} ${s.projectId}`;
      const full = fullNodes.has(s.slotId);
      if (Boolean(s.fullNode) !== full) problems.push(`${at}: marked fullNode=${Boolean(s.fullNode)}, the epoch's full nodes are [${[...fullNodes]}]`);
      checked++;
      if (s.verdict !== 'accepted') problems.push(`${at}: ${s.verdict} (${s.reason})`);
      const value = { slotId: s.slotId, deadline: s.deadline, snapshotCid: s.snapshotCid, epochId: e.epochId, projectId: s.projectId };
      let recovered = '';
      try { recovered = recoveredSigner(digestOf(value), ethers.Signature.from('0x' + s.signature), signers.get(s.slotId)); } catch (err) { recovered = `unrecoverable (${err.shortMessage || err.message})`; }
      if (recovered !== signers.get(s.slotId)) problems.push(`${at}: signature recovers to ${recovered}, not the slot's signer ${signers.get(s.slotId)}`);
      let bytes = null;
      try { bytes = fs.readFileSync(s.snapshotPath); } catch (err) { problems.push(`${at}: snapshot bytes unreadable: ${err.message}`); }
      if (bytes && cidOf(bytes) !== s.snapshotCid) problems.push(`${at}: the snapshot's bytes hash to ${cidOf(bytes)}, not ${s.snapshotCid}`);
      const pool = selected.get(s.slotId);
      if (full) {
        if (!(s.projectId.toLowerCase().match(/0x[0-9a-f]{40}/g) || []).some((a) => activePools.has(a))) problems.push(`${at}: a full node's submission names no active pool`);
      } else if (pool === undefined) problems.push(`${at}: slot ${s.slotId} was not selected`);
      else if (!s.projectId.toLowerCase().includes(pool.toLowerCase())) problems.push(`${at}: slot ${s.slotId} was assigned ${pool}`);
    }
    // Each full node of the run's: every active pool of each of its projects, once.
    for (const slot of fullNodes) {
      if (!signers.has(slot)) continue;
      const types = (record.fullNode && record.fullNode.projects) || [];
      if (types.length === 0) problems.push(`${where}: full node ${slot}: the record names none of its projects, so its coverage cannot be checked`);
      const accepted = e.submissions.filter((s) => s.slotId === slot && s.verdict === 'accepted');
      for (const type of types) {
        // How many of the type's accepted ids name each address (a pool's).
        const named = new Map();
        for (const s of accepted) {
          if (!s.projectId.startsWith(`${type}:`)) continue;
          for (const a of new Set(s.projectId.toLowerCase().match(/0x[0-9a-f]{40}/g) || [])) named.set(a, (named.get(a) || 0) + 1);
        }
        for (const p of record.pools) {
          const n = named.get(p.toLowerCase()) || 0;
          if (n !== 1) problems.push(`${where}: full node ${slot} ${type} pool ${p}: ${n} accepted submissions, not 1`);
        }
      }
    }
    // A slot the record says sent nothing (its node's compute failed, with
    // why) is an explained miss, reported, not a fault of the record — as
    // long as nothing of that slot is in the epoch's submissions.
    const ended = new Map((e.endedWithoutSending || []).map((x) => [x.slotId, x.why]));
    for (const [slot, pool] of selected) {
      if (!signers.has(slot)) continue;
      const ok = e.submissions.some((s) => s.slotId === slot && s.verdict === 'accepted' && s.projectId.toLowerCase().includes(pool.toLowerCase()));
      if (ok) continue;
      if (!ended.has(slot)) problems.push(`${where}: selected slot ${slot} (pool ${pool}) has no accepted submission`);
      else if (e.submissions.some((s) => s.slotId === slot)) problems.push(`${where}: the record says selected slot ${slot} sent nothing, but it lists a submission of it`);
      else explained.push(`${where}: selected slot ${slot} (pool ${pool}) sent nothing, as the record says: ${ended.get(slot)}`);
    }
  }
  if (problems.length) {
    for (const p of problems) console.log(`FAIL ${p}`);
    process.exit(1);
  }
  const onchain = record.epochs.filter((e) => e.onchain && e.onchain.finalized).length;
  const validators = (record.epochs[0] && record.epochs[0].validators) ? record.epochs[0].validators.length : 0;
  const batches = withValidator
    ? `; ${finalized} finalized batches recomputed (votes, root, batch CID)` +
      (validators ? `; ${validators} validators' batches each epoch; ${onchain} epochs finalized on chain with the majority's root and CIDs, each read back whole by a consumer` : '')
    : '';
  for (const x of explained) console.log(`NOT SENT ${x}`);
  const notSent = explained.length ? `; ${explained.length} selected slot(s) sent nothing, each explained by the record (not a fault of the record: the run itself failed)` : '';
  const full = record.fullNode ? `; full node ${record.fullNode.slotId} covered all ${record.pools.length} pools once per epoch (${record.fullNode.workers.length} workers, ${record.fullNode.assign})` : '';
  console.log(`verified ${checked} submissions over ${record.epochs.length} epochs: signatures, CIDs and selection hold${full}${batches}${notSent}`);
}

main();
