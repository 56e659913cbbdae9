#!/usr/bin/env node
// Compiles the devnet contracts with the npm-pinned solc (no download):
//   node compile.js  ->  out/<Contract>.json {abi, bytecode}
'use strict';
const fs = require('fs');
const path = require('path');
const solc = require('solc');

const dir = path.join(__dirname, 'contracts');
const sources = {};
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.sol'))) {
  sources[f] = { content: fs.readFileSync(path.join(dir, f), 'utf8') };
}
const input = {
  language: 'Solidity',
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    // Paris: no PUSH0, so the bytecode runs on any anvil hardfork in use.
    evmVersion: 'paris',
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
let failed = false;
for (const e of output.errors || []) {
  console.error(e.formattedMessage);
  failed = failed || e.severity === 'error';
}
if (failed) process.exit(1);
fs.mkdirSync(path.join(__dirname, 'out'), { recursive: true });
for (const contracts of Object.values(output.contracts)) {
  for (const [name, c] of Object.entries(contracts)) {
    const artifact = { contractName: name, compiler: solc.version(), abi: c.abi, bytecode: '0x' + c.evm.bytecode.object };
    fs.writeFileSync(path.join(__dirname, 'out', `${name}.json`), JSON.stringify(artifact));
  }
}
