#!/usr/bin/env node
// The production contract's rules on a real anvil, and the drills contract's
// hooks: every owner- and role-gated function refused to a stranger, releases
// only contiguous (two releasers racing for one range: one wins), slots
// registered in order with the node count derived from them, days on the
// market's schedule, finalization counted from current validators only.
//
//   node contracts/test/roles.js     (after `npm ci` in devnet/ and compile.js)
//
// Exit 0: every check held; 1: each failure is printed.
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const devnet = path.join(__dirname, '..', '..', 'devnet');
const ethers = require(path.join(devnet, 'node_modules', 'ethers'));
const { StandardMerkleTree } = require(path.join(devnet, 'node_modules', '@openzeppelin', 'merkle-tree'));
const PS = require(path.join(__dirname, '..', 'out', 'ProtocolState.json'));
const DR = require(path.join(__dirname, '..', 'out', 'ProtocolStateDrills.json'));
const ANVIL = path.join(devnet, 'node_modules', '@foundry-rs', 'anvil-linux-amd64', 'bin', 'anvil');

let passed = 0, failedN = 0;
let provider;
/**
 * The receipt of a sent transaction, asked for until it is there (not
 * ethers' wait(), which can wait for a block after the one that mined it);
 * a reverted one throws, as wait() does.
 */
async function mined(tx) {
  for (let tries = 0; ; tries++) {
    const receipt = await provider.getTransactionReceipt(tx.hash);
    if (receipt) {
      if (receipt.status !== 1) throw new Error(`transaction ${tx.hash} reverted`);
      return receipt;
    }
    if (tries === 500) throw new Error(`transaction ${tx.hash} not mined after 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
async function deployed(factory, ...args) {
  const c = await factory.deploy(...args);
  await mined(c.deploymentTransaction());
  return c;
}
const ok = (cond, what) => { if (cond) { passed++; console.log('ok   ', what); } else { failedN++; console.log('FAIL ', what); } };
async function reverts(p, what, msg) {
  try { const tx = await p; if (tx && tx.hash) await mined(tx); ok(false, `${what} (did not revert)`); }
  catch (e) {
    const reason = e.reason || e.shortMessage || e.message;
    ok(!msg || String(reason).includes(msg), `${what} reverts: ${reason}`);
  }
}

async function main() {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'anvilhome-'));
  const anvil = spawn(ANVIL, ['--port', '0'], { env: { ...process.env, HOME: home }, stdio: ['ignore', 'pipe', 'pipe'] });
  const port = await new Promise((res, rej) => {
    let buf = '';
    anvil.stdout.on('data', (d) => { buf += d; const m = buf.match(/Listening on 127\.0\.0\.1:(\d+)/); if (m) res(m[1]); });
    anvil.on('exit', (c) => rej(new Error('anvil exited ' + c)));
    setTimeout(() => rej(new Error('anvil did not start')), 30000);
  });
  console.log(`anvil pid ${anvil.pid} on port ${port}`);
  try {
    provider = new ethers.JsonRpcProvider(`http://127.0.0.1:${port}`, undefined, { polling: true, pollingInterval: 50, cacheTimeout: -1 });
    const signers = [];
    for (let i = 0; i < 10; i++) signers.push(await provider.getSigner(i));
    const [owner, stranger, rel2, reg2, v1, v2, v3, v4, v5, snap] = signers;
    const M = ethers.getAddress('0x' + '11'.repeat(20));
    const M2 = ethers.getAddress('0x' + '22'.repeat(20));
    const gas = {};

    const ps = await deployed(new ethers.ContractFactory(PS.abi, PS.bytecode, owner), );
    const as = (s) => ps.connect(s);
    const deployReceipt = await mined(ps.deploymentTransaction());
    const evNames = deployReceipt.logs.map((l) => ps.interface.parseLog(l).name);
    ok(JSON.stringify(evNames) === JSON.stringify(['OwnershipTransferred', 'ReleaserUpdated', 'RegistrarUpdated']), `constructor events ${evNames}`);
    ok(await ps.owner() === owner.address && await ps.isReleaser(owner.address) && await ps.isRegistrar(owner.address), 'deployer is owner, releaser, registrar');

    // --- a stranger on every gated function
    const S = as(stranger);
    await reverts(S.transferOwnership(stranger.address), 'stranger transferOwnership', 'not owner');
    await reverts(S.setReleaser(stranger.address, true), 'stranger setReleaser', 'not owner');
    await reverts(S.setRegistrar(stranger.address, true), 'stranger setRegistrar', 'not owner');
    await reverts(S.setEpochsPerDay(M, 3), 'stranger setEpochsPerDay', 'not owner');
    await reverts(S.updateAddresses(M, 0, [stranger.address], [true]), 'stranger updateAddresses', 'not owner');
    await reverts(S.releaseEpoch(M, 1, 1), 'stranger releaseEpoch', 'not a releaser');
    await reverts(S.startDay(M), 'stranger startDay', 'not a releaser or owner');
    await reverts(S.registerSlot(1, snap.address), 'stranger registerSlot', 'not a registrar or owner');
    await reverts(S.reassignSlot(1, snap.address), 'stranger reassignSlot', 'not a registrar or owner');
    await reverts(S.removeSlot(1), 'stranger removeSlot', 'not a registrar or owner');
    await reverts(S.setFullNode(M, 1, true), 'stranger setFullNode', 'not a registrar or owner');
    await reverts(S.setSnapshotterEnabled(snap.address, false), 'stranger setSnapshotterEnabled', 'not a registrar or owner');
    await reverts(S.submitSubmissionBatch(M, 'b', 1, ethers.keccak256('0x')), 'stranger submitSubmissionBatch', 'not a validator');
    await reverts(S.submitBatchAttestation(M, 'b', 1, ethers.ZeroHash.replace(/0$/, '1')), 'stranger submitBatchAttestation', 'not a validator');
    await reverts(as(owner).transferOwnership(ethers.ZeroAddress), 'transferOwnership to zero', 'zero address');

    // --- roles granted / revoked
    await mined(await ps.setReleaser(rel2.address, true));
    await mined(await ps.setRegistrar(reg2.address, true));
    ok(await ps.isReleaser(rel2.address) && await ps.isRegistrar(reg2.address), 'owner grants releaser and registrar');

    // --- releases: contiguity
    await reverts(ps.releaseEpoch(M, 0, 5), 'first release with begin 0', 'begin must be at least 1');
    await reverts(ps.releaseEpoch(M, 10, 9), 'release with end < begin', 'end must not be before begin');
    let r = await mined(await ps.releaseEpoch(M, 100, 100));
    gas.releaseFirst = r.gasUsed;
    ok((await ps.currentEpochId(M)) === 1n && (await ps.lastReleasedEnd(M)) === 100n, 'first release 100..100 -> epoch 1, lastReleasedEnd 100');
    await reverts(ps.releaseEpoch(M, 100, 100), 'same range again', 'begin must be last end + 1');
    await reverts(ps.releaseEpoch(M, 102, 102), 'release leaving a hole (102 after 100)', 'begin must be last end + 1');
    await reverts(ps.releaseEpoch(M, 99, 101), 'overlapping release', 'begin must be last end + 1');
    r = await mined(await as(rel2).releaseEpoch(M, 101, 101));
    gas.releaseNext = r.gasUsed;
    const ev = ps.interface.parseLog(r.logs[0]);
    ok(ev.name === 'EpochReleased' && ev.args.epochId === 2n && ev.args.begin === 101n, 'second releaser releases 101..101 -> epoch 2');
    r = await mined(await ps.releaseEpoch(M, 102, 110));
    ok((await ps.currentEpochId(M)) === 3n, 'contiguous multi-block release 102..110 -> epoch 3');
    // two releasers racing for the same range: both sent in one block
    await provider.send('evm_setAutomine', [false]);
    const raceA = await ps.releaseEpoch(M, 111, 111, { gasLimit: 200000 });
    const raceB = await as(rel2).releaseEpoch(M, 111, 111, { gasLimit: 200000 });
    await provider.send('evm_mine', []);
    await provider.send('evm_setAutomine', [true]);
    const ra = await provider.getTransactionReceipt(raceA.hash), rb = await provider.getTransactionReceipt(raceB.hash);
    ok(ra.status + rb.status === 1 && (await ps.currentEpochId(M)) === 4n, `race in one block: statuses ${ra.status},${rb.status}; exactly one released epoch 4`);
    // another market is independent
    await mined(await ps.releaseEpoch(M2, 5, 5));
    ok((await ps.currentEpochId(M2)) === 1n && (await ps.lastReleasedEnd(M2)) === 5n, 'other market starts on its own');
    // revoke
    await mined(await ps.setReleaser(rel2.address, false));
    await reverts(as(rel2).releaseEpoch(M, 112, 112), 'revoked releaser', 'not a releaser');

    // --- days
    await mined(await ps.startDay(M));
    ok((await ps.currentDayId(M)) === 1n, 'startDay by owner on a market without schedule');
    const M3 = ethers.getAddress('0x' + '33'.repeat(20));
    await reverts(ps.setEpochsPerDay(M3, 0), 'epochsPerDay 0', 'at least 1');
    r = await mined(await ps.setEpochsPerDay(M3, 3));
    ok(ps.interface.parseLog(r.logs[0]).name === 'EpochsPerDayUpdated', 'EpochsPerDayUpdated emitted');
    await reverts(ps.startDay(M3), 'startDay on a scheduled market', 'schedule');
    const dayAt = [];
    for (let e = 1; e <= 7; e++) {
      r = await mined(await ps.releaseEpoch(M3, 1000 + e, 1000 + e));
      if (e === 1) gas.releaseWithDay = r.gasUsed;
      if (e === 2) gas.releaseScheduledNoDay = r.gasUsed;
      const names = r.logs.map((l) => ps.interface.parseLog(l));
      const day = names.find((x) => x.name === 'DayStartedEvent');
      if (day) {
        dayAt.push(`${e}:${day.args.dayId}`);
        ok(names[0].name === 'DayStartedEvent' && names[1].name === 'EpochReleased', `epoch ${e}: DayStartedEvent comes before EpochReleased`);
      }
    }
    ok(dayAt.join(' ') === '1:1 4:2 7:3', `epochsPerDay 3: days start at epochs ${dayAt.join(' ')} (want 1:1 4:2 7:3)`);
    ok((await ps.currentDayId(M3)) === 3n, 'currentDayId 3 after 7 epochs');
    // A change of length applies from the next day: the current day keeps
    // its length, no day is skipped (3 → 1 mid-day) or held back (1 → 5),
    // and a change made again before it begins replaces it (5: 2, then 4).
    const changeAt = { 7: [1], 11: [5], 12: [2, 4] };
    const later = [];
    for (let e = 8; e <= 21; e++) {
      for (const n of changeAt[e - 1] || []) await mined(await ps.setEpochsPerDay(M3, n));
      r = await mined(await ps.releaseEpoch(M3, 1000 + e, 1000 + e));
      const day = r.logs.map((l) => ps.interface.parseLog(l)).find((x) => x.name === 'DayStartedEvent');
      if (day) later.push(`${e}:${day.args.dayId}`);
    }
    ok(later.join(' ') === '10:4 11:5 12:6 17:7 21:8', `epochsPerDay changed 3→1→5→2→4: days start at epochs ${later.join(' ')} (want 10:4 11:5 12:6 17:7 21:8)`);
    r = await mined(await ps.setEpochsPerDay(M3, 4));
    ok(r.logs.length === 0, 'setting the length it already has changes nothing (no event)');

    // --- slots
    await reverts(ps.registerSlot(0, snap.address), 'register slot 0', 'slot ids start at 1');
    await reverts(ps.registerSlot(1, ethers.ZeroAddress), 'register to zero address', 'zero address');
    await reverts(ps.registerSlot(2, snap.address), 'register slot 2 before slot 1', 'in order');
    r = await mined(await ps.registerSlot(1, v1.address));
    gas.registerSlotFirst = r.gasUsed;
    r = await mined(await as(reg2).registerSlot(2, v2.address));
    gas.registerSlotNext = r.gasUsed;
    r = await mined(await ps.registerSlot(3, v1.address));
    gas.registerSlotSameSigner = r.gasUsed;
    ok((await ps.getTotalNodeCount()) === 3n, 'getTotalNodeCount 3 after 3 registrations');
    // Every change of a snapshotter's enabled flag is an event (the
    // validators judge by it as of each release), and only a change is.
    const enabledEvents = (rc) => rc.logs.map((l) => ps.interface.parseLog(l)).filter((x) => x.name === 'SnapshotterEnabled').map((x) => `${x.args.snapshotter}:${x.args.enabled}`);
    r = await mined(await ps.setSnapshotterEnabled(v1.address, false));
    ok(enabledEvents(r).join() === `${v1.address}:false` && (await ps.allSnapshotters(v1.address)) === false, `disabling emits SnapshotterEnabled(false): ${enabledEvents(r)}`);
    r = await mined(await ps.setSnapshotterEnabled(v1.address, false));
    ok(enabledEvents(r).length === 0, 'disabling again emits nothing');
    r = await mined(await ps.reassignSlot(3, v1.address));
    ok(enabledEvents(r).join() === `${v1.address}:true` && (await ps.allSnapshotters(v1.address)) === true, `a reassignment to a disabled snapshotter enables it, with the event: ${enabledEvents(r)}`);
    await reverts(ps.registerSlot(2, snap.address), 'register a taken slot', 'slot taken');
    // full nodes in two markets, then remove the slot
    await reverts(ps.setFullNode(M, 9, true), 'setFullNode on an unregistered slot', 'slot not registered');
    await mined(await ps.setFullNode(M, 3, true));
    await mined(await as(reg2).setFullNode(M2, 3, true));
    await mined(await ps.setFullNode(M, 1, true));
    ok(String(await ps.getFullNodes(M)) === '3,1' && String(await ps.getFullNodes(M2)) === '3', 'full nodes marked in two markets');
    await reverts(ps.removeSlot(2), 'remove a middle slot', 'only the last slot');
    await reverts(ps.removeSlot(9), 'remove an unregistered slot', 'slot not registered');
    r = await mined(await as(reg2).removeSlot(3));
    const rm = r.logs.map((l) => ps.interface.parseLog(l)).map((x) => `${x.name}(${x.args.join(',')})`);
    console.log('      removeSlot(3) events:', rm.join(' '));
    ok((await ps.getTotalNodeCount()) === 2n, 'getTotalNodeCount 2 after 3 registrations and 1 removal');
    ok((await ps.slotSnapshotterMapping(3)) === ethers.ZeroAddress, 'removed slot maps to zero');
    ok(String(await ps.getFullNodes(M)) === '1' && String(await ps.getFullNodes(M2)) === '' && !(await ps.isFullNode(M, 3)) && !(await ps.isFullNode(M2, 3)), 'removal cleared its full-node marks in both markets');
    await mined(await ps.registerSlot(3, snap.address));
    ok((await ps.getTotalNodeCount()) === 3n && !(await ps.isFullNode(M, 3)), 'slot 3 registered again, not a full node');
    await reverts(ps.reassignSlot(7, snap.address), 'reassign an unregistered slot', 'slot not registered');
    r = await mined(await ps.reassignSlot(2, snap.address));
    ok(r.logs.map((l) => ps.interface.parseLog(l).name).join(',') === 'SlotReassigned,SlotRegistered' && (await ps.slotSnapshotterMapping(2)) === snap.address, 'reassignSlot emits SlotReassigned and SlotRegistered');
    await mined(await ps.setRegistrar(reg2.address, false));
    await reverts(as(reg2).registerSlot(4, snap.address), 'revoked registrar', 'not a registrar or owner');

    // --- finalization counts only current validators
    const F = ethers.getAddress('0x' + '44'.repeat(20));
    await mined(await ps.updateAddresses(F, 0, [v1, v2, v3, v4, v5].map((s) => s.address), [true, true, true, true, true]));
    await mined(await ps.releaseEpoch(F, 1, 1));
    const pids = ['p1', 'p2'];
    const X = await ps.merkleRoot(pids, ['cidA', 'cidB']);
    const Y = await ps.merkleRoot(pids, ['cidA', 'cidZ']);
    await mined(await as(v1).submitSubmissionBatch(F, 'batchX', 1, X));
    await mined(await as(v2).submitBatchAttestation(F, 'batchX', 1, X));
    await mined(await as(v3).submitBatchAttestation(F, 'batchX', 1, Y));
    ok(!(await ps.epochBatch(F, 1)).finalized, '5 validators, X has 2 of 5: not final');
    await mined(await ps.updateAddresses(F, 0, [v1.address, v2.address], [false, false]));
    ok((await ps.getTotalValidatorsCount(F)) === 3n, 'V1 and V2 removed: 3 validators');
    const fin = await mined(await ps.finalize(F, 1));
    ok(fin.logs.length === 0 && !(await ps.epochBatch(F, 1)).finalized, 'finalize after removal: X NOT finalized (removed V1, V2 do not count)');
    const [forRoot, against] = await ps.currentVotes(F, 1);
    ok(forRoot === 0n && against === 1n, `currentVotes (for X, against) = (${forRoot}, ${against})`);
    ok((await ps.attestationsForRoot(F, 1, X)) === 2n && (await ps.attestationsCount(F, 1)) === 3n, 'raw attestationsForRoot/attestationsCount unchanged (2, 3)');
    ok(!(await ps.outvoted(F, 1)), 'not outvoted: 1 current against of 3');
    const [, st] = await ps.maxSnapshotsCid(F, 'p2', 1);
    ok(st === 0n, 'p2 still PENDING');
    // current validators V4, V5 attest Y -> X outvoted; V3 replaces with Y, finalized by V3+V4+V5? (3 of 3)
    await mined(await as(v4).submitBatchAttestation(F, 'batchX', 1, Y));
    ok(await ps.outvoted(F, 1), 'V4 attests Y: X outvoted (2 of 3 current against)');
    await mined(await as(v3).submitSubmissionBatch(F, 'batchY', 1, Y));
    const b = await ps.epochBatch(F, 1);
    ok(b.finalized && b.root === Y, 'V3 replaces with Y: finalized at once (V3, V4 = 2 of 3 current)');
    ok((await ps.maxSnapshotsCid(F, 'p2', 1))[1] === 0n, 'p2 PENDING until its pair is stored');
    // the pairs, stored by anyone with a multiproof against the finalized root
    await reverts(S.storeFinalizedCids(F, 1, pids, ['cidA', 'cidB'], [], [true]), 'storing pairs of the outvoted root', 'does not prove');
    const stored = await mined(await S.storeFinalizedCids(F, 1, pids, ['cidA', 'cidZ'], [], [true]));
    ok(ps.interface.parseLog(stored.logs[0]).name === 'FinalizedCidsStored' && (await ps.storedCids(F, 1)) === 2n, 'a stranger stores both pairs (FinalizedCidsStored, storedCids 2)');
    const [cid2, st2] = await ps.maxSnapshotsCid(F, 'p2', 1);
    ok(cid2 === 'cidZ' && st2 === 1n, 'p2 FINALIZED as cidZ');
    ok((await ps.lastFinalizedSnapshot(F, 'p2')) === 1n, 'lastFinalizedSnapshot(p2) = 1');
    await mined(await S.storeFinalizedCids(F, 1, pids, ['cidA', 'cidZ'], [], [true]));
    ok((await ps.storedCids(F, 1)) === 2n, 'storing again adds nothing');
    // OpenZeppelin's own multiproofs over a 7-project epoch, every range, prove on chain
    const H = ethers.getAddress('0x' + '66'.repeat(20));
    await mined(await ps.updateAddresses(H, 0, [v1.address], [true]));
    await mined(await ps.releaseEpoch(H, 1, 1));
    const seven = [...Array(7).keys()].map((i) => [`proj${i}`, `cid${i}`]);
    const oz = StandardMerkleTree.of(seven, ['string', 'string'], { sortLeaves: false });
    ok(oz.root === (await ps.merkleRoot(seven.map((v) => v[0]), seven.map((v) => v[1]))), 'merkleRoot equals OpenZeppelin StandardMerkleTree (sortLeaves: false)');
    await mined(await as(v1).submitSubmissionBatch(H, 'b7', 1, oz.root));
    let rangesOk = true;
    for (const [a, b] of [[0, 3], [3, 4], [4, 7], [0, 7]]) {
      const mp = oz.getMultiProof([...Array(b - a).keys()].map((i) => a + i));
      const ids = mp.leaves.map((v) => v[0]), cids = mp.leaves.map((v) => v[1]);
      try { await mined(await S.storeFinalizedCids(H, 1, ids, cids, mp.proof, mp.proofFlags)); } catch (e) { rangesOk = false; console.log('  range', a, b, e.shortMessage || e.message); }
    }
    ok(rangesOk && (await ps.storedCids(H, 1)) === 7n && (await ps.maxSnapshotsCid(H, 'proj5', 1))[0] === 'cid5', 'OpenZeppelin getMultiProof ranges 0-3, 3-4, 4-7, 0-7 store all seven');
    const div = await ps.divergentValidators(F, 1);
    ok(div.length === 2 && div.includes(v1.address) && div.includes(v2.address), 'divergent: V1 and V2 (X)');
    // merkle root as before: two leaves
    const leaf = (p, c) => ethers.keccak256(ethers.keccak256(ethers.AbiCoder.defaultAbiCoder().encode(['string', 'string'], [p, c])));
    const [la, lb] = [leaf('p1', 'cidA'), leaf('p2', 'cidZ')];
    const want = la < lb ? ethers.keccak256(ethers.concat([la, lb])) : ethers.keccak256(ethers.concat([lb, la]));
    ok(Y === want, 'merkleRoot is the sorted-pair hash of the double-hashed leaves');
    ok(await ps.verifyFinalizedCid(F, 1, 'p2', 'cidZ', [la]), 'verifyFinalizedCid with a one-step proof');

    // the same case where removal does not matter: all 3 current -> finalizes (majority still > half)
    const G = ethers.getAddress('0x' + '55'.repeat(20));
    await mined(await ps.updateAddresses(G, 0, [v1, v2, v3].map((s) => s.address), [true, true, true]));
    await mined(await ps.releaseEpoch(G, 1, 1));
    await mined(await as(v1).submitSubmissionBatch(G, 'bx', 1, X));
    ok(!(await ps.epochBatch(G, 1)).finalized, '1 of 3: not final');
    await mined(await as(v2).submitBatchAttestation(G, 'bx', 1, X));
    ok((await ps.epochBatch(G, 1)).finalized, '2 of 3 current: finalized');

    // --- ownership transfer
    r = await mined(await ps.transferOwnership(stranger.address));
    const ot = ps.interface.parseLog(r.logs[0]);
    ok(ot.name === 'OwnershipTransferred' && ot.args[0] === owner.address && ot.args[1] === stranger.address && (await ps.owner()) === stranger.address, 'transferOwnership emits (previous, next)');
    await reverts(ps.setReleaser(rel2.address, true), 'old owner after transfer', 'not owner');
    ok(await ps.isReleaser(owner.address), 'old owner keeps its releaser role until revoked');
    await mined(await as(stranger).setReleaser(owner.address, false));
    await reverts(ps.releaseEpoch(M, 112, 112), 'old owner after its releaser role is revoked', 'not a releaser');

    // --- drills
    const dr = await deployed(new ethers.ContractFactory(DR.abi, DR.bytecode, owner), 7);
    ok((await dr.getTotalNodeCount()) === 7n, 'Drills(7): getTotalNodeCount 7 with no slots');
    await mined(await dr.registerSlot(1, snap.address));
    ok((await dr.getTotalNodeCount()) === 7n, 'Drills: still 7 after a registration (override)');
    await mined(await dr.setTotalNodeCount(5000));
    ok((await dr.getTotalNodeCount()) === 5000n, 'Drills setTotalNodeCount(5000)');
    await reverts(dr.connect(stranger).setTotalNodeCount(1), 'stranger setTotalNodeCount', 'not owner');
    const dr0 = await deployed(new ethers.ContractFactory(DR.abi, DR.bytecode, owner), 0);
    await mined(await dr0.registerSlot(1, snap.address));
    await mined(await dr0.registerSlot(2, snap.address));
    ok((await dr0.getTotalNodeCount()) === 2n, 'Drills(0): derived count 2 until set');
    await mined(await dr0.setTotalNodeCount(0));
    ok((await dr0.getTotalNodeCount()) === 0n, 'Drills(0) then setTotalNodeCount(0): 0');
    r = await mined(await dr.emitMalformedRelease(M));
    const lg = r.logs[0];
    ok(r.logs.length === 1 && lg.topics[0] === dr.interface.getEvent('EpochReleased').topicHash && lg.topics[1] === ethers.zeroPadValue(M, 32) && BigInt(lg.topics[2]) === 99n && lg.data === ethers.zeroPadValue('0x07', 32), 'emitMalformedRelease: EpochReleased topics (market, 99) with 32 bytes of data');
    let undecodable = false; try { dr.interface.parseLog(lg); } catch { undecodable = true; }
    ok(undecodable, 'the malformed log does not decode');
    await reverts(dr.connect(stranger).emitMalformedRelease(M), 'stranger emitMalformedRelease', 'not owner');
    await mined(await dr.releaseEpoch(M, 50, 50));
    r = await mined(await dr.releaseEpochWithId(M, 12, 1, 1));
    ok((await dr.currentEpochId(M)) === 12n && dr.interface.parseLog(r.logs[0]).args.epochId === 12n, 'releaseEpochWithId(12, 1..1) ignores contiguity');
    await reverts(dr.connect(stranger).releaseEpochWithId(M, 13, 1, 1), 'stranger releaseEpochWithId', 'not owner');
    r = await mined(await dr.releaseEpoch(M, 51, 51));
    ok(dr.interface.parseLog(r.logs[0]).args.epochId === 13n, 'releaseEpoch after a drill: epoch 13, range continues from 50');
    await mined(await dr.transferOwnership(stranger.address));
    await mined(await dr.connect(stranger).setTotalNodeCount(3));
    ok((await dr.getTotalNodeCount()) === 3n, 'Drills hooks follow ownership');

    console.log('gas used:', Object.entries(gas).map(([k, v]) => `${k}=${v}`).join(' '));
  } finally {
    anvil.kill('SIGTERM');
    await new Promise((res) => anvil.on('exit', res));
    console.log(`anvil ${anvil.pid} stopped`);
    fs.rmSync(home, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failedN} failed`);
  process.exit(failedN ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(1); });
