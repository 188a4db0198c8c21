#!/usr/bin/env node
// A native-solc command line over solc-js, for forge (native solc cannot be downloaded here;
// contracts/compile.js explains). forge asks `--version`, then pipes a standard-JSON input to
// `--standard-json` (with --allow-paths/--base-path/--include-path, which name where imports may
// be read from: the import callback below reads them).
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const args = process.argv.slice(2);
if (args.includes("--version")) {
  process.stdout.write(`solc, the solidity compiler commandline interface\nVersion: ${solc.version().replace("Emscripten.clang", "Linux.g++")}\n`);
  process.exit(0);
}
if (!args.includes("--standard-json")) {
  process.stderr.write(`solc-js.js: only --version and --standard-json are supported, got: ${args.join(" ")}\n`);
  process.exit(2);
}
const roots = [];
for (let i = 0; i < args.length; i++) {
  if (["--base-path", "--include-path", "--allow-paths"].includes(args[i])) roots.push(...args[i + 1].split(","));
}
roots.push(process.cwd());
function findImports(importPath) {
  for (const base of roots) {
    const candidate = path.resolve(base, importPath);
    if (fs.existsSync(candidate)) return { contents: fs.readFileSync(candidate, "utf8") };
  }
  return { error: `not found: ${importPath}` };
}
const input = fs.readFileSync(0, "utf8");
process.stdout.write(solc.compile(input, { import: findImports }));
