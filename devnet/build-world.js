#!/usr/bin/env node
// Deploys the local network's world onto a running anvil: ERC20 tokens, the
// real Uniswap V3 factory, position manager and router (bytecode from the
// npm-pinned artifacts), N pools with full-range liquidity, and ProtocolState
// with slots 1..=SLOTS registered to anvil's accounts 1..=SLOTS.
//
//   node build-world.js --rpc http://127.0.0.1:PORT --pools 5 --slots 4 --out world/manifest.json
'use strict';
const fs = require('fs');
const path = require('path');
const { ethers } = require('ethers');

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const RPC = args.rpc;
const POOLS = Number(args.pools ?? 5);
const SLOTS = Number(args.slots ?? 4);
const OUT = args.out;
if (!RPC || !OUT || !(POOLS >= 1) || !(SLOTS >= 1)) {
  console.error('usage: node build-world.js --rpc URL --out FILE [--pools N>=1] [--slots N>=1]');
  process.exit(2);
}

const MNEMONIC = 'test test test test test test test test test test test junk'; // anvil's public development mnemonic
const DATA_MARKET = '0x00000000000000000000000000000000000d47a1';
const OTHER_DATA_MARKET = '0x00000000000000000000000000000000000d47b2';
// Uniswap V3 gas depends on whether the block timestamp moved to a new second,
// so estimates can fall short: every transaction carries a fixed limit.
const TX = { gasLimit: 15_000_000n };
const FEES = [3000, 500, 10000];
const SPACING = { 500: 10, 3000: 60, 10000: 200 };
const Q96 = 1n << 96n;

const modules = path.join(__dirname, 'node_modules');
const artifact = (p) => JSON.parse(fs.readFileSync(path.join(modules, p), 'utf8'));
const ERC20 = artifact('@openzeppelin/contracts/build/contracts/ERC20PresetMinterPauser.json');
const FACTORY = artifact('@uniswap/v3-core/artifacts/contracts/UniswapV3Factory.sol/UniswapV3Factory.json');
const NPM = artifact('@uniswap/v3-periphery/artifacts/contracts/NonfungiblePositionManager.sol/NonfungiblePositionManager.json');
const ROUTER = artifact('@uniswap/v3-periphery/artifacts/contracts/SwapRouter.sol/SwapRouter.json');
// The production contract plus the drills' hooks (contracts/test/): the
// devnet's node count is fixed by its constructor, as the drills need.
const PROTOCOL_STATE = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'contracts', 'out', 'ProtocolStateDrills.json'), 'utf8'));

/**
 * Sends transactions one after another without waiting for each to be mined,
 * then mines them in one block and waits for all. Sends stay in nonce order.
 * One block per batch, not one per transaction: anvil hashes its whole state
 * trie for every block, so a world of 1,000 pools mined a block at a time
 * spent most of its build there (the build's anvil has no block gas limit).
 */
/**
 * The receipt of a transaction already sent, asked for until it is there.
 * Not ethers' `wait()`: it may take a block number read before the
 * transaction was mined and then wait for a block after it, which on a chain
 * that mines only when asked never comes (the build hung so on a busy machine).
 */
async function mined(provider, hash) {
  for (let tries = 0; ; tries++) {
    const receipt = await provider.getTransactionReceipt(hash);
    if (receipt) return receipt;
    if (tries === 500) throw new Error(`transaction ${hash} not mined after 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function all(provider, thunks) {
  await provider.send('evm_setAutomine', [false]);
  const sent = [];
  for (const send of thunks) sent.push(await send());
  for (let blocks = 0; ; blocks++) {
    const { pending } = await provider.send('txpool_status', []);
    if (Number(pending) === 0) break;
    if (blocks === 10) throw new Error(`${Number(pending)} transactions still pending after ${blocks} blocks`);
    await provider.send('evm_mine', []);
  }
  await provider.send('evm_setAutomine', [true]);
  const receipts = [];
  for (const tx of sent) receipts.push(await mined(provider, tx.hash));
  for (const r of receipts) if (r.status !== 1) throw new Error(`transaction ${r.hash} reverted`);
  return receipts;
}

async function main() {
  const started = Date.now();
  // One request per HTTP call: ethers otherwise holds each request back to
  // batch it with others, and the sends here go one after another.
  const provider = new ethers.JsonRpcProvider(RPC, undefined, { staticNetwork: true, pollingInterval: 20, cacheTimeout: -1, batchMaxCount: 1 });
  await provider.send('anvil_setBlockTimestampInterval', [12]);
  const accounts = [...Array(10).keys()].map((i) => ethers.HDNodeWallet.fromPhrase(MNEMONIC, undefined, `m/44'/60'/0'/0/${i}`));
  const deployer = new ethers.NonceManager(accounts[0].connect(provider));
  const me = accounts[0].address;
  const deploy = async (a, ...ctor) => {
    const c = await new ethers.ContractFactory(a.abi, a.bytecode, deployer).deploy(...ctor, TX);
    const receipt = await mined(provider, c.deploymentTransaction().hash);
    if (receipt.status !== 1) throw new Error(`deploying ${a.contractName || 'a contract'} reverted`);
    return c;
  };

  // Enough tokens that pairs x fee tiers give the requested pools.
  let k = 2;
  while ((k * (k - 1) / 2) * FEES.length < POOLS) k++;
  const tokens = [];
  for (let i = 0; i < k; i++) tokens.push(await deploy(ERC20, `Devnet Token ${i}`, `DT${i}`));
  const weth = await deploy(ERC20, 'Wrapped Ether (devnet)', 'WETH');
  const factory = await deploy(FACTORY);
  const npm = await deploy(NPM, factory.target, weth.target, ethers.ZeroAddress);
  const router = await deploy(ROUTER, factory.target, weth.target);
  const supply = ethers.parseEther('1000000000000');
  await all(provider, tokens.flatMap((t) => [
    () => t.mint(me, supply, TX),
    () => t.approve(npm.target, ethers.MaxUint256, TX),
    () => t.approve(router.target, ethers.MaxUint256, TX),
  ]));

  // Pools: every pair at 0.3 %, then 0.05 %, then 1 %, until there are enough.
  const specs = [];
  for (const fee of FEES) {
    for (let a = 0; a < k && specs.length < POOLS; a++) {
      for (let b = a + 1; b < k && specs.length < POOLS; b++) {
        const [t0, t1] = [tokens[a], tokens[b]].sort((x, y) => (BigInt(x.target) < BigInt(y.target) ? -1 : 1));
        // Prices differ per pool so snapshots differ: token1 per token0 = 1 + n/7.
        const price = 1 + specs.length / 7;
        const sqrtPriceX96 = (BigInt(Math.floor(Math.sqrt(price) * 1e12)) * Q96) / 10n ** 12n;
        specs.push({ token0: t0.target, token1: t1.target, fee, sqrtPriceX96 });
      }
    }
  }
  const CHUNK = 250;
  for (let i = 0; i < specs.length; i += CHUNK) {
    await all(provider, specs.slice(i, i + CHUNK).map((s) => () => npm.createAndInitializePoolIfNecessary(s.token0, s.token1, s.fee, s.sqrtPriceX96, TX)));
  }
  for (let i = 0; i < specs.length; i += CHUNK) {
    await all(provider, specs.slice(i, i + CHUNK).map((s) => () => {
      const max = Math.floor(887272 / SPACING[s.fee]) * SPACING[s.fee];
      return npm.mint({
        token0: s.token0, token1: s.token1, fee: s.fee, tickLower: -max, tickUpper: max,
        amount0Desired: ethers.parseEther('1000'), amount1Desired: ethers.parseEther('1000'),
        amount0Min: 0, amount1Min: 0, recipient: me, deadline: 2n ** 40n,
      }, TX);
    }));
  }
  const pools = [];
  for (const s of specs) pools.push({ address: (await factory.getPool(s.token0, s.token1, s.fee)).toLowerCase(), token0: s.token0, token1: s.token1, fee: s.fee });

  const protocolState = await deploy(PROTOCOL_STATE, SLOTS);
  await all(provider, [...Array(SLOTS).keys()].map((i) => () => protocolState.registerSlot(i + 1, accounts[1 + (i % 9)].address, TX)));

  const manifest = {
    chainId: Number((await provider.getNetwork()).chainId),
    head: await provider.getBlockNumber(),
    blockTimestampInterval: 12,
    deployer: me,
    accounts: accounts.map((a) => ({ address: a.address, privateKey: a.privateKey })),
    protocolState: protocolState.target,
    dataMarket: DATA_MARKET,
    otherDataMarket: OTHER_DATA_MARKET,
    slots: [...Array(SLOTS).keys()].map((i) => ({ slotId: i + 1, signer: accounts[1 + (i % 9)].address })),
    factory: factory.target,
    positionManager: npm.target,
    swapRouter: router.target,
    weth: weth.target,
    tokens: tokens.map((t) => t.target),
    pools,
    buildMs: Date.now() - started,
  };
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, JSON.stringify(manifest, null, 2));
  console.log(`world: ${pools.length} pools, ${tokens.length} tokens, ${SLOTS} slots, head ${manifest.head}, ${manifest.buildMs} ms`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
