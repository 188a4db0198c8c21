// Compile the chain layer's test contract (tests/chain/contracts/*.sol) into
// tests/chain/contracts/artifacts/ with contracts/compile.js's compiler and settings.
// Run: node tests/chain/contracts/compile_probe.js
const path = require("path");
const { compileDirectory } = require("../../../contracts/compile.js");

const count = compileDirectory(__dirname, path.join(__dirname, "artifacts"));
console.log(`compiled ${count} test contract(s)`);
