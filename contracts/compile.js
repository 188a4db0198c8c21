// Compile every contracts/src/*.sol with solc-js (native solc cannot be downloaded here) and
// write contracts/artifacts/<Contract>.json = {abi, bytecode, deployedBytecode}. Deterministic:
// CI recompiles and fails on any diff against the committed artifacts.
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const SRC = path.join(__dirname, "src");
const OUT = path.join(__dirname, "artifacts");

function findImports(importPath) {
  for (const base of [SRC, path.join(__dirname, "node_modules")]) {
    const candidate = path.join(base, importPath);
    if (fs.existsSync(candidate)) return { contents: fs.readFileSync(candidate, "utf8") };
  }
  return { error: `not found: ${importPath}` };
}

const sources = {};
for (const file of fs.readdirSync(SRC).filter((f) => f.endsWith(".sol")).sort()) {
  sources[file] = { content: fs.readFileSync(path.join(SRC, file), "utf8") };
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
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
fs.mkdirSync(OUT, { recursive: true });
for (const [file, contracts] of Object.entries(output.contracts)) {
  if (!sources[file]) continue; // OpenZeppelin and other imports
  for (const [name, c] of Object.entries(contracts)) {
    if (!c.evm.bytecode.object && c.abi.length === 0) continue;
    const artifact = { contractName: name, sourceName: file, abi: c.abi, bytecode: "0x" + c.evm.bytecode.object, deployedBytecode: "0x" + c.evm.deployedBytecode.object };
    fs.writeFileSync(path.join(OUT, `${name}.json`), JSON.stringify(artifact, null, 2) + "\n");
  }
}
console.log(`compiled ${Object.keys(sources).length} source files`);
