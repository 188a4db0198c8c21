// Shared helpers of the explorer's pages: DOM building, the node's JSON, names, links, blocks with times.
// Plain ES module: no build step, no library, nothing from outside this node.

export const VERDICTS = { 1: "pass", 2: "fail", 3: "tie", 4: "worker-default" };
export const state = { names: {}, network: null };  // address (lower case) -> "node i"; the last /network body

export const $ = (id) => document.getElementById(id);
export const short = (hex) => (hex ? hex.slice(0, 10) + "…" + hex.slice(-4) : "-");
export const eth = (wei) => (Number(BigInt(wei || 0)) / 1e18).toLocaleString(undefined, { maximumFractionDigits: 6 }) + " ETH";
export const nameOf = (address) => (address && state.names[address.toLowerCase()]) || short(address);

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-") || key === "role" || key === "tabindex") node.setAttribute(key, value);
    else if (key.startsWith("on")) node[key] = value;
    else node[key] = value;
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) {
    const error = new Error((body.error && body.error.message) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return body;
}

export const api = (path) => getJson("/v1/verillm/explorer/" + path);

export function badge(text) {
  return el("span", { class: "badge " + String(text).replace(/\s+/g, "-") }, text);
}

export function setNames(nodes) {
  state.names = {};
  nodes.forEach((n, i) => { state.names[n.address.toLowerCase()] = "node " + i; });
}

// --- links: every id is a link to its page -------------------------------------------------------
export const jobLink = (hash, text) => el("a", { href: "#/job/" + hash, class: "mono", "data-link": "job" }, text || short(hash));
export const auditLink = (id, text) => el("a", { href: "#/audit/" + id, "data-link": "audit" }, text || "audit #" + id);
export const batchLink = (id, text) => el("a", { href: "#/batch/" + id, "data-link": "batch" }, text || "batch #" + id);
export const txLink = (hash) => (hash ? el("a", { href: "#/tx/" + hash, class: "mono muted", title: hash, "data-link": "tx" }, short(hash)) : "-");
export function nodeLink(address) {
  if (!address) return "-";
  const mine = state.network && address.toLowerCase() === state.network.this_node.toLowerCase();
  return el("a", { href: "#/node/" + address.toLowerCase(), title: address, "data-link": "node" }, nameOf(address) + (mine ? " (this node)" : ""));
}

// --- blocks and time ---------------------------------------------------------------------------------
// A date and time in one format everywhere (24 h, the reader's locale), as block times show their clock time.
export function dateTime(seconds) {
  return new Date(seconds * 1000).toLocaleString(undefined, { hour12: false });
}

export function clockTime(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString(undefined, { hour12: false });
}

export function ago(seconds, now) {
  const s = Math.max(0, Math.round(now - seconds));
  return s < 90 ? `${s} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
}

// A block number with its time (from the body's block_times), or, for a block still to come, an estimate.
export function block(number, body) {
  if (number === null || number === undefined) return "-";
  const link = el("a", { href: "#/block/" + number, class: "block-link", "data-link": "block" }, "block " + number);
  const times = (body && body.block_times) || {};
  const clock = (body && body.clock) || {};
  if (times[number] !== undefined) {
    return el("span", { class: "block" }, link, " ", el("time", { class: "muted", title: new Date(times[number] * 1000).toString() }, clockTime(times[number])));
  }
  if (clock.head !== undefined && number > clock.head && clock.seconds_per_block) {
    const seconds = Math.round((number - clock.head) * clock.seconds_per_block);
    return el("span", { class: "block" }, "block " + number, " ", el("span", { class: "muted" }, `(in ${number - clock.head} blocks, ≈ ${seconds} s)`));
  }
  return el("span", { class: "block" }, link);
}

export function section(title, ...children) {
  return el("section", {}, el("h3", {}, title), ...children);
}

export function table(headers, rows, attrs = {}) {
  // Each cell carries its column's name: at phone width a row is shown as a card of "name value"
  // lines (style.css), so no column, the votes included, falls off a 390 px screen.
  for (const row of rows) {
    [...row.children].forEach((cell, i) => { if (typeof headers[i] === "string" && !cell.hasAttribute("data-label")) cell.setAttribute("data-label", headers[i]); });
  }
  return el("table", attrs, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
            el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", { colSpan: headers.length, class: "muted" }, "none"))]));
}

export function dl(pairs) {
  return el("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

// A vote as it turned out: a caught liar's ✓ is shown struck through and labelled a lie.
export function vote(v) {
  if (!v || v.vote === null || v.vote === undefined) return el("span", { class: "muted", title: v && v.label }, "–");
  const mark = v.vote === 1 ? "✓" : "✗";
  if (v.lie) return el("span", { class: "vote-lie", title: v.label }, el("s", {}, mark), " lie");
  return el("span", { class: v.vote === 1 ? "vote-agree" : "vote-disagree", title: v.label }, mark);
}

export function pager(total, limit, offset, hrefFor) {
  const first = total ? offset + 1 : 0, last = Math.min(offset + limit, total);
  return el("nav", { class: "pager" },
    offset > 0 ? el("a", { href: hrefFor(Math.max(0, offset - limit)), "data-page": "newer" }, "← newer") : el("span", { class: "muted" }, "← newer"),
    el("span", { class: "muted" }, ` ${first}–${last} of ${total} `),
    last < total ? el("a", { href: hrefFor(offset + limit), "data-page": "older" }, "older →") : el("span", { class: "muted" }, "older →"));
}

// The hash route: "#/kind/id?key=value" -> {path: ["kind", "id"], query: URLSearchParams}.
export function route() {
  const hash = location.hash.replace(/^#/, "");
  const [path, query] = hash.split("?");
  return { path: path.split("/").filter(Boolean), query: new URLSearchParams(query || "") };
}

export function hrefWith(base, query, changes) {
  const next = new URLSearchParams(query);
  for (const [k, v] of Object.entries(changes)) { if (v === null || v === "" || v === undefined) next.delete(k); else next.set(k, v); }
  const text = next.toString();
  return "#/" + base + (text ? "?" + text : "");
}
