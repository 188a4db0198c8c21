// VeriLLM explorer: reads this node's JSON routes (/v1/verillm/explorer/...) every 3 s and
// renders nodes and stakes, recent jobs, and one job's audit timeline (#job=0x… in the URL).
// Plain browser JavaScript: no build step, no library, no network beyond this node.
"use strict";

const REFRESH_MS = 3000;
const VERDICTS = { 1: "pass", 2: "fail", 3: "tie", 4: "worker default" };
let names = {};  // address (lower case) -> "node i"

const $ = (id) => document.getElementById(id);
const short = (hex) => (hex ? hex.slice(0, 10) + "…" + hex.slice(-4) : "-");
const eth = (wei) => (Number(BigInt(wei || 0)) / 1e18).toLocaleString(undefined, { maximumFractionDigits: 6 }) + " ETH";
const nameOf = (address) => (address && names[address.toLowerCase()]) || short(address);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key === "onclick") node.onclick = value;
    else node[key] = value;
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
  return body;
}

function badge(text) {
  return el("span", { class: "badge " + text.replace(/\s+/g, "-") }, text);
}

function renderNetwork(net) {
  names = {};
  net.nodes.forEach((n, i) => { names[n.address.toLowerCase()] = "node " + i; });
  const serving = net.serving || { ready: true, reasons: [] };
  $("serving").hidden = serving.ready;
  $("serving").textContent = serving.ready ? "" : "this node cannot serve audited jobs: " + serving.reasons.join("; ");
  $("chain").textContent = `chain ${net.chain_id} · block ${net.head} · model ${net.model.name} · Jobs ${short(net.addresses.Jobs)} · this node ${nameOf(net.this_node)}`;
  const body = $("nodes").tBodies[0];
  body.replaceChildren(...net.nodes.map((n, i) => {
    const state = !n.registered ? "withdrawn" : n.unbonding_end_block ? "unbonding" : n.active ? "active" : "inactive";
    return el("tr", { "data-address": n.address },
      el("td", {}, el("b", {}, "node " + i), " ", el("span", { class: "mono" }, n.address)),
      el("td", { class: "mono" }, n.endpoint || "-"),
      el("td", {}, eth(n.stake_wei)),
      el("td", {}, n.slashed_wei && n.slashed_wei !== "0" ? el("span", { class: "vote-disagree" }, eth(n.slashed_wei)) : "-"),
      el("td", {}, badge(state)),
      el("td", {}, n.locks));
  }));
}

function votesCell(audit) {
  if (!audit || !audit.votes) return el("td", {}, "-");
  const cell = el("td", {});
  for (const [member, vote] of Object.entries(audit.votes)) {
    cell.append(el("span", { class: vote === 1 ? "vote-agree" : "vote-disagree", title: nameOf(member) }, vote === 1 ? "✓" : "✗"));
  }
  return cell;
}

function renderJobs(body) {
  $("jobs-count").textContent = `(${body.jobs.length})`;
  const selected = currentJob();
  $("jobs").tBodies[0].replaceChildren(...body.jobs.map((job) => {
    const audit = job.audit || {};
    const slashed = (audit.slashed || []).map((s) => nameOf(s.node)).join(", ") || "-";
    return el("tr", { class: "job" + (job.job_hash === selected ? " selected" : ""), "data-job": job.job_hash, "data-status": job.status,
                      onclick: () => { location.hash = "job=" + job.job_hash; } },
      el("td", { class: "mono" }, short(job.job_hash)),
      el("td", {}, nameOf(job.worker)),
      el("td", {}, badge(job.status)),
      el("td", {}, job.batch ? `#${job.batch.batch_id} leaf ${job.batch.index}` : "-"),
      el("td", {}, audit.audit_id !== undefined ? "#" + audit.audit_id : "-"),
      votesCell(audit),
      el("td", {}, audit.verdict || (audit.round_verdict ? VERDICTS[audit.round_verdict] + " (round)" : "-")),
      el("td", {}, slashed));
  }));
}

function describe(event) {
  const a = event.args;
  switch (event.event) {
    case "BatchPosted": return `batch #${a.batchId} posted by ${nameOf(a.dispatcher)}: ${a.count} receipts under root ${short(a.root)}`;
    case "AuditDrawn": return `audit draw for batch #${a.batchId}: VRF output β ${short(a.beta)}`;
    case "AuditStarted": return `audit #${a.auditId} started for leaf ${a.index} (worker ${nameOf(a.worker)}, ${a.outputTokens} output tokens${a.requested ? ", requested by the client" : ""})`;
    case "CommitteeDrawn": return `committee drawn (round ${a.round}): ${a.members.map(nameOf).join(", ")}`;
    case "CommitteeReceiptPosted": return `${nameOf(a.member)} (seat ${a.slot + 1}) committed: root ${short(a.commitmentRoot)}`;
    case "ChallengeDrawn": return `challenge drawn: seed ${short(a.challengeSeed)}`;
    case "Opened": return a.slot === 0 ? `worker ${nameOf(a.party)} opened the challenged cells`
                                       : `${nameOf(a.party)} opened and voted ${a.vote === 1 ? "✓ agree" : "✗ disagree"}`;
    case "RoundDecided": return `round ${a.round} decided: ${VERDICTS[a.verdict] || a.verdict} (${a.agree} agree, ${a.disagree} disagree)`;
    case "PartySlashed": return `slashed ${nameOf(a.node)}: ${a.reason}, ${eth(a.amountWei)}`;
    case "Slashed": return `Registry: ${nameOf(a.node)} stake now ${eth(a.stakeLeftWei)}`;
    case "Adjudicated": return `adjudicated ${nameOf(a.member)}: its vote contradicts its own data`;
    case "AuditAbandoned": return `audit abandoned in round ${a.round}: the committee never filled`;
    case "AuditSettled": return `settled: ${VERDICTS[a.verdict] || a.verdict}`;
    default: return event.event + " " + JSON.stringify(a);
  }
}

function renderTimeline(body) {
  $("timeline-section").hidden = false;
  $("timeline-job").textContent = body.job_hash;
  const audit = body.audit || {};
  $("timeline-summary").replaceChildren(
    el("div", {}, "status ", badge(body.status), " · worker ", nameOf(body.worker), " · receipt ", el("span", { class: "mono" }, short(body.receipt_hash)),
       audit.committee && audit.committee.length ? " · committee " + audit.committee.map(nameOf).join(", ") : ""));
  const items = [el("li", { "data-event": "Receipt" }, el("span", { class: "block" }, "off-chain"), `receipt signed by ${nameOf(body.worker)}`)];
  for (const event of body.timeline) {
    items.push(el("li", { "data-event": event.event, class: /Slashed|Adjudicated/.test(event.event) ? "slash" : "" },
      el("span", { class: "block" }, "block " + event.block), describe(event), " ",
      el("span", { class: "mono muted", title: event.tx_hash }, short(event.tx_hash))));
  }
  $("timeline").replaceChildren(...items);
  $("timeline-links").replaceChildren(
    el("a", { href: body.links.evidence, target: "_blank" }, "evidence (job, receipts, proven openings)"), " · ",
    el("a", { href: body.links.status, target: "_blank" }, "status JSON"), " · replay: ",
    el("code", {}, body.links.replay));
}

function currentJob() {
  const match = /job=(0x[0-9a-fA-F]{64})/.exec(location.hash);
  return match ? match[1] : null;
}

async function refresh() {
  try {
    renderNetwork(await getJson("/v1/verillm/explorer/network"));
    renderJobs(await getJson("/v1/verillm/explorer/jobs?limit=100"));
    const job = currentJob();
    if (job) renderTimeline(await getJson("/v1/verillm/explorer/jobs/" + job));
    $("error").hidden = true;
    $("refreshed").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    $("error").hidden = false;
    $("error").textContent = "cannot read this node's network view: " + error.message;
  }
}

window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, REFRESH_MS);
