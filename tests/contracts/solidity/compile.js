// Compile the contract tests' test-only contracts (tests/contracts/solidity/*.sol) into
// tests/contracts/solidity/artifacts/, with the same solc-js and settings as contracts/compile.js.
// Run: node tests/contracts/solidity/compile.js
const fs = require("fs");
const path = require("path");
const solc = require(path.join(__dirname, "../../../contracts/node_modules/solc"));

const sources = {};
for (const file of fs.readdirSync(__dirname).filter((f) => f.endsWith(".sol")).sort()) {
  sources[file] = { content: fs.readFileSync(path.join(__dirname, file), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    evmVersion: "cancun",
    optimizer: { enabled: true, runs: 200 },
    viaIR: true,
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
for (const e of output.errors || []) console.error(e.formattedMessage);
if ((output.errors || []).some((e) => e.severity === "error")) process.exit(1);
const out = path.join(__dirname, "artifacts");
fs.mkdirSync(out, { recursive: true });
for (const [file, contracts] of Object.entries(output.contracts)) {
  for (const [name, c] of Object.entries(contracts)) {
    const artifact = { contractName: name, sourceName: file, abi: c.abi, bytecode: "0x" + c.evm.bytecode.object, deployedBytecode: "0x" + c.evm.deployedBytecode.object };
    fs.writeFileSync(path.join(out, `${name}.json`), JSON.stringify(artifact, null, 2) + "\n");
  }
}
console.log(`compiled ${Object.keys(sources).length} test contract(s)`);
