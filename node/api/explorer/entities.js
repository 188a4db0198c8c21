// The pages of a node (stake history, audited jobs, committees, votes, slashes, batches), a batch,
// a block and a transaction.
import { jobRow } from "./home.js";
import { timeline } from "./job.js";
import { stakeHistoryPlot } from "./plot.js";
import { api, auditLink, badge, batchLink, block, dateTime, dl, el, eth, nameOf, nodeLink, section, short, table, txLink, vote } from "./util.js";

export const nodePage = {
  title: ([address]) => nameOf(address) + " " + short(address),
  load: ([address]) => api("nodes/" + address),
  draw(body) {
    const s = body.state || {};
    const status = !s.registered ? "withdrawn" : s.unbonding_end_block ? "unbonding" : s.active ? "active" : "inactive";
    const address = body.address;
    return [
      dl([["address", el("span", { class: "mono" }, address)], ["state", [badge(status), status === "inactive" ? el("span", { class: "muted" }, " below the minimum stake: never drawn, serves no job")
                                  : status === "unbonding" ? el("span", { id: "unbonding-end" }, " — may withdraw from ", block(s.unbonding_end_block, body)) : ""]], ["stake", eth(s.stake_wei)],
          ["slashed in all", s.slashed_wei ? el("span", { class: "vote-disagree" }, eth(s.slashed_wei)) : "-"], ["endpoint", el("span", { class: "mono" }, s.endpoint || "-")],
          ["open audits locking its stake", s.locks ?? "-"], body.this_node && ["", "this is the node serving this page"],
          ["jobs it served through this node", el("a", { href: "#/jobs?worker=" + address, "data-link": "node-jobs" }, "list them")],
          ["audits of its jobs", el("a", { href: "#/audits?worker=" + address }, "list them")]]),
      section("Stake history", stakeHistoryPlot(body.stake_history, body.clock.head),
        table(["block", "event", "change", "stake after", "transaction"], body.stake_history.map((h) => el("tr", { "data-event": h.event },
          el("td", {}, block(h.block, body)), el("td", {}, h.event + (h.unbonding_end_block ? ` (unbonded at block ${h.unbonding_end_block})` : h.event === "Slashed" && !h.change_wei ? " (nothing left to take)" : "")),
          el("td", { class: h.change_wei < 0 ? "vote-disagree" : "" }, h.change_wei ? (h.change_wei < 0 ? "−" : "+") + eth(Math.abs(h.change_wei)) : "-"),
          el("td", {}, h.stake_wei !== null ? eth(h.stake_wei) : "-"), el("td", {}, txLink(h.tx_hash)))), { id: "stake-history" })),
      section("Slashes", table(["block", "audit / batch", "reason", "taken", "stake left", "transaction"], body.slashes.map((x) => el("tr", { class: "slash-row" },
        el("td", {}, block(x.block, body)),
        el("td", {}, x.audit_id !== null ? el("a", { href: `#/audit/${x.audit_id}?focus=slash-${address}`, "data-link": "slash" }, "audit #" + x.audit_id) : x.batch_id !== null ? batchLink(x.batch_id) : "-"),
        el("td", { class: x.penalty ? "" : "vote-disagree" }, x.reason), el("td", {}, x.amount_wei !== null ? eth(x.amount_wei) : "-"),
        el("td", {}, x.stake_left_wei !== null ? eth(x.stake_left_wei) : "-"), el("td", {}, txLink(x.tx_hash)))), { id: "node-slashes" })),
      section("Votes on committees", table(["block", "audit", "vote", "what it came to", "audit outcome"], body.votes.map((v) => el("tr", { class: v.lie ? "caught" : "", "data-audit": v.audit_id },
        el("td", {}, block(v.block, body)), el("td", {}, auditLink(v.audit_id)), el("td", {}, vote(v)), el("td", { class: "label" + (v.lie ? " vote-disagree" : "") }, v.label),
        el("td", {}, badge(v.outcome)))), { id: "node-votes" })),
      section("Committees it was drawn into", table(["block", "audit", "round", "members", "outcome"], body.committees.map((c) => el("tr", {},
        el("td", {}, block(c.block, body)), el("td", {}, auditLink(c.audit_id)), el("td", {}, c.round + (c.attempt ? ` (redraw ${c.attempt})` : "")),
        el("td", {}, c.members.flatMap((m, i) => [i ? ", " : "", nodeLink(m)])), el("td", {}, badge(c.outcome)))), { id: "node-committees" })),
      section("Its jobs that were audited", table(["block", "audit", "batch", "outcome", "slashed"], body.served.map((j) => el("tr", {},
        el("td", {}, block(j.block, body)), el("td", {}, auditLink(j.audit_id)), el("td", {}, batchLink(j.batch_id), ` leaf ${j.index}`),
        el("td", {}, badge(j.outcome)), el("td", {}, j.slashed.length ? j.slashed.map((x) => x.reason).join("; ") : "-"))), { id: "node-served" })),
      section("Batches it posted as a dispatcher", table(["block", "batch", "receipts", "transaction"], body.batches.map((b) => el("tr", {},
        el("td", {}, block(b.block, body)), el("td", {}, batchLink(b.batch_id)), el("td", {}, b.count), el("td", {}, txLink(b.tx_hash)))), { id: "node-batches" })),
    ];
  },
};

export const batchPage = {
  title: ([id]) => "Batch #" + id,
  load: ([id]) => api("batches/" + id),
  draw(body) {
    return [
      dl([["dispatcher", nodeLink(body.dispatcher)], ["receipts", body.count], ["root", el("span", { class: "mono" }, body.root)],
          ["posted", [block(body.posted_block, body), " ", txLink(body.tx_hash)]],
          ["audit draw", body.draw ? [block(body.draw.block, body), ` β ${short(body.draw.beta)}; audits start until `, block(body.draw.start_window_ends, body)] : "not drawn yet"]]),
      section("Audits started from it", table(["audit", "leaf", "worker", "outcome", "started"], body.audits.map((a) => el("tr", { "data-audit": a.audit_id },
        el("td", {}, auditLink(a.audit_id)), el("td", {}, a.index), el("td", {}, nodeLink(a.worker)), el("td", {}, badge(a.outcome || "open")),
        el("td", {}, block(a.block, body)))), { id: "batch-audits" })),
      section("Its jobs this node dispatched", table(["job", "worker", "status", "batch", "audit", "votes", "verdict", "slashed", "batched in"],
        body.jobs.map((j) => jobRow(j, body)), { id: "jobs" })),
      section("Events", timeline(body.events, body)),
    ];
  },
};

export const blockPage = {
  title: ([n]) => "Block " + n,
  load: ([n]) => api("blocks/" + n),
  draw(body) {
    const n = body.block, time = body.block_times[n];
    return [
      dl([["mined", time ? dateTime(time) : "-"], ["hash", el("span", { class: "mono" }, body.hash)],
          ["transactions", `${body.transactions} (${body.gas_used.toLocaleString()} gas)`], ["chain head", body.head],
          ["", [n > 0 ? el("a", { href: `#/block/${n - 1}` }, "← block " + (n - 1)) : "", " · ", n < body.head ? el("a", { href: `#/block/${n + 1}` }, "block " + (n + 1) + " →") : "head"]]]),
      section(`Protocol events in block ${n}`, body.events.length ? timeline(body.events, body) : el("p", { class: "muted" }, "none: no protocol transaction in this block")),
    ];
  },
};

export const txPage = {
  title: ([hash]) => "Transaction " + short(hash),
  load: ([hash]) => api("txs/" + hash),
  draw(body) {
    const first = body.events[0];
    return [
      dl([["hash", el("span", { class: "mono" }, body.tx_hash)], ["block", block(body.block, body)],
          first.audit_id !== null ? ["audit", auditLink(first.audit_id)] : first.batch_id !== null ? ["batch", batchLink(first.batch_id)] : null,
          body.sent_by_this_node ? ["sent by this node", `${body.sent_by_this_node.function}, ${body.sent_by_this_node.gas_used.toLocaleString()} gas`] : null]),
      section("Protocol events it emitted", timeline(body.events, body)),
    ];
  },
};

