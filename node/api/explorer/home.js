// The overview (network summary, plots, nodes, latest jobs and audits) and the filtered, paged lists.
import { activityPlot, stakePlot } from "./plot.js";
import { api, auditLink, badge, batchLink, block, el, eth, hrefWith, jobLink, nodeLink, pager, section, short, state, table, vote } from "./util.js";

const JOB_STATUSES = ["dispatched", "committed", "audited", "verified", "final", "slashed", "tie", "abandoned"];
const AUDIT_VERDICTS = ["open", "pass", "fail", "tie", "worker-default", "abandoned"];
const PAGE = 25;

function slashedCell(job, slashes) {
  if (!slashes || !slashes.length) return "-";
  return slashes.map((s, i) => [i ? ", " : "", el("a", { href: `#/${job}?focus=slash-${s.node.toLowerCase()}`, class: s.penalty ? "penalty" : "conviction",
                                                    title: s.reason, "data-link": "slash" }, nodeLink(s.node).textContent + (s.penalty ? " (penalty)" : ""))]);
}

export function jobRow(job, body) {
  const audit = job.audit || {};
  return el("tr", { class: "job", "data-job": job.job_hash, "data-status": job.status },
    el("td", {}, jobLink(job.job_hash)),
    el("td", {}, nodeLink(job.worker)),
    el("td", {}, badge(job.status)),
    el("td", {}, job.batch && job.batch.batch_id !== null ? [batchLink(job.batch.batch_id), ` leaf ${job.batch.index}`] : "-"),
    el("td", {}, audit.audit_id !== undefined ? auditLink(audit.audit_id, "#" + audit.audit_id) : "-"),
    el("td", { class: "votes" }, (audit.votes || []).map((v) => vote(v))),
    el("td", {}, audit.outcome ? (audit.outcome === "open" ? (audit.round_verdict ? audit.round_verdict + " (round)" : "open") : audit.outcome) : "-"),
    el("td", {}, slashedCell("job/" + job.job_hash, audit.slashed)),
    el("td", { class: "muted" }, job.batch ? block(job.batch.posted_block, body) : new Date(job.created_at * 1000).toLocaleTimeString()));
}

const JOB_HEADERS = ["job", "worker", "status", "batch", "audit", "votes", "verdict", "slashed", "batched in"];

export function auditRow(a, body) {
  return el("tr", { class: "audit", "data-audit": a.audit_id, "data-outcome": a.outcome },
    el("td", {}, auditLink(a.audit_id, "#" + a.audit_id)),
    el("td", {}, a.job_hash ? jobLink(a.job_hash) : el("span", { class: "muted", title: "another dispatcher's job: only it knows the job hash" }, "elsewhere")),
    el("td", {}, nodeLink(a.worker)),
    el("td", {}, batchLink(a.batch_id), ` leaf ${a.index}`),
    el("td", { class: "votes" }, (a.votes || []).map((v) => vote(v))),
    el("td", {}, badge(a.outcome)),
    el("td", {}, slashedCell("audit/" + a.audit_id, a.slashed)),
    el("td", {}, block(a.started_block, body)));
}

const AUDIT_HEADERS = ["audit", "job", "worker", "batch", "votes", "outcome", "slashed", "started"];

function card(title, value, ...rest) {
  return el("div", { class: "card" }, el("div", { class: "card-title" }, title), el("div", { class: "card-value" }, value), el("div", { class: "muted" }, ...rest));
}

const plural = (n, one, many = one + "s") => `${n} ${n === 1 ? one : many}`;

function cards(s) {
  const since = s.block_times[s.jobs.last_hour_from_block], now = s.clock.head_time;
  const window = since && now ? Math.round((now - since) / 60) : null;
  const perHour = window !== null && window < 59 ? ` in the last ${window} min (the chain is younger than an hour)` : " in the last hour";
  const audits = el("span", { class: "verdicts" }, AUDIT_VERDICTS.filter((v) => s.audits[v]).map((v) =>
    el("a", { href: `#/audits?verdict=${v}`, class: "verdict-count", "data-verdict": v }, badge(`${v} ${s.audits[v]}`))));
  return el("div", { class: "cards", id: "summary" },
    card("nodes", `${s.nodes.active} active`, `${s.nodes.registered} registered`),
    card("stake", eth(s.nodes.stake_wei), `${eth(s.nodes.slashed_wei)} slashed in all`),
    card("jobs", `${s.jobs.last_hour}`, `batched${perHour}; ${s.jobs.batched} in all, ${s.jobs.dispatched_here} through this node`),
    card("audits", audits, `${Object.values(s.audits).reduce((a, b) => a + b, 0)} in all`),
    card("slashes", `${s.slashes.events}`, `${plural(s.slashes.convictions, "conviction")}, ${plural(s.slashes.penalties, "penalty", "penalties")}: ${eth(s.slashes.wei)}`));
}

export function nodesTable(net) {
  return table(["node", "endpoint", "stake", "slashed", "state", "locks"], net.nodes.map((n) => {
    const status = !n.registered ? "withdrawn" : n.unbonding_end_block ? "unbonding" : n.active ? "active" : "inactive";
    return el("tr", { "data-address": n.address },
      el("td", {}, nodeLink(n.address), " ", el("span", { class: "mono muted" }, short(n.address))),
      el("td", { class: "mono" }, n.endpoint || "-"),
      el("td", {}, eth(n.stake_wei)),
      el("td", {}, n.slashed_wei && n.slashed_wei !== "0" ? el("span", { class: "vote-disagree" }, eth(n.slashed_wei)) : "-"),
      el("td", {}, badge(status), status === "unbonding" ? [" until ", block(n.unbonding_end_block, net)] : ""),
      el("td", {}, n.locks));
  }), { id: "nodes" });
}

export const overview = {
  title: () => "Network",
  async load() {
    const [summary, jobs, audits] = await Promise.all([api("summary"), api("jobs?limit=8"), api("audits?limit=8")]);
    return { summary, jobs, audits };
  },
  draw({ summary, jobs, audits }) {
    return [
      cards(summary),
      el("div", { class: "plots" },
        section("Jobs and audits over time", activityPlot(summary)),
        section("Stake by node", stakePlot(summary.stake, state.network.params.min_stake_wei))),
      section("Nodes and stakes", nodesTable(state.network)),
      section(el("span", {}, "Latest jobs through this node ", el("a", { href: "#/jobs", class: "more" }, `all ${jobs.total} →`)),
              table(JOB_HEADERS, jobs.jobs.map((j) => jobRow(j, jobs)), { id: "jobs" })),
      section(el("span", {}, "Latest audits on the chain ", el("a", { href: "#/audits", class: "more" }, `all ${audits.total} →`)),
              table(AUDIT_HEADERS, audits.audits.map((a) => auditRow(a, audits)), { id: "audits" })),
    ];
  },
};

function select(name, options, current, labels = {}) {
  return el("select", { name, "data-filter": name }, el("option", { value: "" }, "any"),
            options.map((o) => el("option", { value: o, selected: o === current }, labels[o] || o)));
}

function filterForm(base, query, fields) {
  const form = el("form", { class: "filters", id: "filters" }, fields.map(([label, input]) => el("label", {}, label + " ", input)),
                  el("button", { type: "submit" }, "apply"), " ", el("a", { href: "#/" + base }, "clear"));
  const apply = (event) => {
    event.preventDefault();
    const changes = { offset: null };
    for (const input of form.querySelectorAll("[data-filter]")) changes[input.name] = input.value.trim();
    location.hash = hrefWith(base, query, changes);
  };
  form.onsubmit = apply;
  for (const s of form.querySelectorAll("select")) s.onchange = apply;
  return form;
}

const workers = () => state.network.nodes.map((n) => n.address.toLowerCase());
const workerLabels = () => Object.fromEntries(state.network.nodes.map((n, i) => [n.address.toLowerCase(), "node " + i]));

export const jobsPage = {
  title: () => "Jobs this node dispatched",
  async load(_, query) {
    const params = new URLSearchParams({ limit: query.get("limit") || PAGE, offset: query.get("offset") || 0 });
    for (const key of ["status", "worker", "model"]) if (query.get(key)) params.set(key, query.get(key));
    return api("jobs?" + params);
  },
  draw(body, _, query) {
    return [
      filterForm("jobs", query, [["status", select("status", JOB_STATUSES, query.get("status"))],
                                 ["worker", select("worker", workers(), query.get("worker"), workerLabels())],
                                 ["model", el("input", { name: "model", "data-filter": "model", value: query.get("model") || "", placeholder: "0x… model id", size: 20 })]]),
      el("section", {}, table(JOB_HEADERS, body.jobs.map((j) => jobRow(j, body)), { id: "jobs" }),
         pager(body.total, body.limit, body.offset, (offset) => hrefWith("jobs", query, { offset }))),
    ];
  },
};

export const auditsPage = {
  title: () => "Audits on the chain",
  async load(_, query) {
    const params = new URLSearchParams({ limit: query.get("limit") || PAGE, offset: query.get("offset") || 0 });
    for (const key of ["verdict", "worker"]) if (query.get(key)) params.set(key, query.get(key));
    return api("audits?" + params);
  },
  draw(body, _, query) {
    return [
      filterForm("audits", query, [["outcome", select("verdict", AUDIT_VERDICTS, query.get("verdict"))],
                                   ["worker", select("worker", workers(), query.get("worker"), workerLabels())]]),
      el("section", {}, table(AUDIT_HEADERS, body.audits.map((a) => auditRow(a, body)), { id: "audits" }),
         pager(body.total, body.limit, body.offset, (offset) => hrefWith("audits", query, { offset }))),
    ];
  },
};
