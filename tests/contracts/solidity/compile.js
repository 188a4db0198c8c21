// Compile the contract tests' test-only contracts (tests/contracts/solidity/*.sol) into
// tests/contracts/solidity/artifacts/ with contracts/compile.js's compiler and settings.
// Run: node tests/contracts/solidity/compile.js
const path = require("path");
const { compileDirectory } = require("../../../contracts/compile.js");

const count = compileDirectory(__dirname, path.join(__dirname, "artifacts"));
console.log(`compiled ${count} test contract(s)`);
