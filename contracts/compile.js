#!/usr/bin/env node
// Compiles contracts/src/*.sol and contracts/test/*.sol with the solc pinned
// in devnet/node_modules (run `npm ci` in devnet/ first; no download):
//   node contracts/compile.js          writes contracts/out/<Contract>.json
//   node contracts/compile.js --check  writes nothing; exit 1 naming each
//                                      artifact that differs from out/
'use strict';
const fs = require('fs');
const path = require('path');

const solcPath = path.join(__dirname, '..', 'devnet', 'node_modules', 'solc');
let solc;
try {
  solc = require(solcPath);
} catch (e) {
  console.error(`cannot load solc from ${solcPath}: run \`npm ci\` in devnet/ first (${e.message})`);
  process.exit(1);
}

const check = process.argv.slice(2).includes('--check');
const unknown = process.argv.slice(2).filter((a) => a !== '--check');
if (unknown.length > 0) {
  console.error(`usage: node contracts/compile.js [--check] (unknown: ${unknown.join(' ')})`);
  process.exit(2);
}

// Source unit names are relative to contracts/ ("src/ProtocolState.sol"), so
// the bytecode's metadata hash does not depend on where the repository is.
const sources = {};
for (const dir of ['src', 'test']) {
  const abs = path.join(__dirname, dir);
  if (!fs.existsSync(abs)) continue;
  for (const f of fs.readdirSync(abs).filter((f) => f.endsWith('.sol')).sort()) {
    sources[`${dir}/${f}`] = { content: fs.readFileSync(path.join(abs, f), 'utf8') };
  }
}

const input = {
  language: 'Solidity',
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    // Paris: no PUSH0, so the bytecode runs on chains without Shanghai.
    evmVersion: 'paris',
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
};

// Imports outside the given sources are refused: everything is local.
const findImports = (p) => ({ error: `import not found: ${p} (only contracts/src and contracts/test are compiled)` });
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
let failed = false;
for (const e of output.errors || []) {
  console.error(e.formattedMessage);
  failed = failed || e.severity === 'error';
}
if (failed) process.exit(1);

const outDir = path.join(__dirname, 'out');
const artifacts = new Map();
for (const [unit, contracts] of Object.entries(output.contracts || {})) {
  for (const [name, c] of Object.entries(contracts)) {
    if (artifacts.has(`${name}.json`)) {
      console.error(`two contracts named ${name} (${unit} and another file): artifact names must be unique`);
      process.exit(1);
    }
    const artifact = { contractName: name, compiler: solc.version(), abi: c.abi, bytecode: '0x' + c.evm.bytecode.object };
    artifacts.set(`${name}.json`, JSON.stringify(artifact, null, 1) + '\n');
  }
}

if (check) {
  const stale = [];
  for (const [file, text] of artifacts) {
    const p = path.join(outDir, file);
    if (!fs.existsSync(p)) stale.push(`contracts/out/${file} (missing)`);
    else if (fs.readFileSync(p, 'utf8') !== text) stale.push(`contracts/out/${file} (differs from a fresh compile)`);
  }
  if (fs.existsSync(outDir)) {
    for (const f of fs.readdirSync(outDir).filter((f) => f.endsWith('.json')).sort()) {
      if (!artifacts.has(f)) stale.push(`contracts/out/${f} (no contract of that name any more)`);
    }
  }
  if (stale.length > 0) {
    for (const s of stale) console.error(`stale: ${s}`);
    console.error('run `node contracts/compile.js` and commit contracts/out/');
    process.exit(1);
  }
  console.log(`contracts/out/ matches a fresh compile (${artifacts.size} artifacts, solc ${solc.version()})`);
  process.exit(0);
}

fs.mkdirSync(outDir, { recursive: true });
for (const [file, text] of artifacts) {
  fs.writeFileSync(path.join(outDir, file), text);
  console.log(`wrote contracts/out/${file}`);
}
