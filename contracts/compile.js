// Compile Solidity with solc-js (native solc cannot be downloaded here) into
// <out>/<Contract>.json = {contractName, sourceName, abi, bytecode, deployedBytecode}.
// `node contracts/compile.js` compiles contracts/src/*.sol into contracts/artifacts/; the test
// suites' own contracts reuse `compileDirectory` with the same compiler and settings.
// Deterministic: CI recompiles and fails on any diff against the committed artifacts.
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const SETTINGS = {
  evmVersion: "cancun",
  optimizer: { enabled: true, runs: 200 },
  viaIR: true,
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
};

function importResolver(srcDir) {
  return (importPath) => {
    // The repository root last: test contracts import the protocol's ("contracts/src/X.sol").
    for (const base of [srcDir, path.join(__dirname, "node_modules"), path.join(__dirname, "..")]) {
      const candidate = path.join(base, importPath);
      if (fs.existsSync(candidate)) return { contents: fs.readFileSync(candidate, "utf8") };
    }
    return { error: `not found: ${importPath}` };
  };
}

function compileDirectory(srcDir, outDir) {
  const sources = {};
  for (const file of fs.readdirSync(srcDir).filter((f) => f.endsWith(".sol")).sort()) {
    sources[file] = { content: fs.readFileSync(path.join(srcDir, file), "utf8") };
  }
  const input = { language: "Solidity", sources, settings: SETTINGS };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: importResolver(srcDir) }));
  for (const e of output.errors || []) console.error(e.formattedMessage);
  if ((output.errors || []).some((e) => e.severity === "error")) process.exit(1);
  fs.mkdirSync(outDir, { recursive: true });
  for (const [file, contracts] of Object.entries(output.contracts)) {
    if (!sources[file]) continue; // OpenZeppelin and other imports
    for (const [name, c] of Object.entries(contracts)) {
      if (!c.evm.bytecode.object && c.abi.length === 0) continue;
      const artifact = { contractName: name, sourceName: file, abi: c.abi, bytecode: "0x" + c.evm.bytecode.object, deployedBytecode: "0x" + c.evm.deployedBytecode.object };
      fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(artifact, null, 2) + "\n");
    }
  }
  return Object.keys(sources).length;
}

module.exports = { compileDirectory };

if (require.main === module) {
  const count = compileDirectory(path.join(__dirname, "src"), path.join(__dirname, "artifacts"));
  console.log(`compiled ${count} source files`);
}
