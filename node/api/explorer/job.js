// A job's page and an audit's page: the seats and what each party's part came to (a caught liar's
// vote shown as the lie it was), what an open audit waits for, and the timeline, block by block.
import { api, auditLink, badge, batchLink, block, dateTime, dl, el, eth, jobLink, nodeLink, section, short, table, txLink, VERDICTS, vote } from "./util.js";

function describe(event, body) {
  const a = event.args, n = nodeLink;
  switch (event.event) {
    case "BatchPosted": return [batchLink(a.batchId), " posted by ", n(a.dispatcher), `: ${a.count} receipts under root ${short(a.root)}`];
    case "AuditDrawn": return [`audit draw for `, batchLink(a.batchId), `: VRF output β ${short(a.beta)}`];
    case "AuditStarted": return [auditLink(a.auditId), ` started for leaf ${a.index} (worker `, n(a.worker),
                                 a.outputTokens ? `, ${a.outputTokens} output tokens${a.requested ? ", requested by the client" : ""})`
                                                : "; drawn privately by its dispatcher: the receipt is shown with the draw)"];
    case "WorkerReceiptShown": return [`the worker's receipt shown (${a.outputTokens} output tokens): the round can be drawn`];
    case "CommitteeDrawn": return [`committee drawn (round ${a.round}${a.attempt ? ", redraw " + a.attempt : ""}): `, a.members.flatMap((m, i) => [i ? ", " : "", n(m)])];
    case "CommitteeReceiptPosted": return [n(a.member), ` (seat ${a.slot + 1}) committed: root ${short(a.commitmentRoot)}`];
    case "ChallengeDrawn": return [`challenge drawn: seed ${short(a.challengeSeed)}`];
    case "Opened": return a.slot === 0 ? ["worker ", n(a.party), " opened the challenged cells"]
                                       : [n(a.party), ` opened and voted ${a.vote === 1 ? "✓ agree" : "✗ disagree"}`];
    case "RoundDecided": return [`round ${a.round} decided: ${VERDICTS[a.verdict] || a.verdict} (${a.agree} agree, ${a.disagree} disagree)`];
    case "PartySlashed": return ["slashed ", n(a.node), `: ${a.reason}, ${eth(a.amountWei)}`];
    case "Slashed": return ["Registry: ", n(a.node), ` stake now ${eth(a.stakeLeftWei)}`];
    case "Adjudicated": return ["adjudicated ", n(a.member), a.vote === 1 ? ": it voted agree, but its own committed data disagrees with the worker's (or with the appeal majority's, after a FAIL): a lie, slashed"
                                                                  : ": its committed data contradict the worker's data the appeal round found honest: a lie, slashed"];
    case "Contradicted": return [`first-round agree of slot ${a.slot} contradicted by appeal seat ${a.appealSlot} (${a.count} so far; a majority of the appeal's seats slashes it)`];
    case "EscalationStarted": return ["appealed (escalated) by ", n(a.escalator), ": a larger committee, drawn from a later blockhash, will re-judge"];
    case "EscalationLapsed": return ["escalation lapsed: nobody drew its committee in time"];
    case "Contested": return ["contest #" + a.contestId + " by ", n(a.challenger), `: party slot ${a.slot} must prove its opened leaves`];
    case "ContestLost": return ["contest #" + a.contestId + " lost by ", n(a.party), `: slashed ${eth(a.slashedWei)}`];
    case "AuditAbandoned": return [`audit abandoned in round ${a.round}: ${a.reason}` + (a.reason === "committee never drawn" ? " (a selected job's dispatcher is slashed for it)" : "; nobody slashed for it")];
    case "AuditSkipped": return [`leaf ${a.index} of `, batchLink(a.batchId), ` selected but not audited: another audit owns its receipt, or its worker left beyond the horizon`];
    case "DispatcherSlashed": return ["dispatcher ", n(a.dispatcher), ` slashed: ${a.reason}, ${eth(a.amountWei)}`];
    case "DeliveryClaimed": return [n(a.member), ` (round ${a.round}) claims its verification job never came: the worker publishes the transcript by block ${a.publishDeadline}`];
    case "TranscriptPublished": return ["transcript published by ", n(a.publisher)];
    case "AuditSettled": return [`settled: ${VERDICTS[a.verdict] || a.verdict}`];
    case "VoteSealed": return [n(a.member), ` (round ${a.round}, seat ${a.slot + 1}) sealed its vote: hidden until every member has sealed`];
    case "PrivateDrawRevealed": return [`the dispatcher revealed its private draw (secret ${short(a.secret)}): the committee is the one it committed to`];
    case "PrivateDrawMissed": return ["dispatcher ", n(a.dispatcher), " missed its private draw: the round is drawn publicly"];
    case "SilentSeat": return [n(a.member), ` (round ${a.round}, seat ${a.slot + 1}) never answered its seat: penalised ${eth(a.penaltyWei)}`];
    case "DeliveryDefaulted": return ["worker ", n(a.worker), ` never published the transcript it owed: slashed ${eth(a.slashedWei)}`];
    case "ClaimBondsResolved": return [`delivery claims of round ${a.round} resolved: the publisher `, n(a.publisher), ` paid ${eth(a.paidWei)}, ${eth(a.refundedWei)} refunded`];
    case "ContestAnswered": return ["contest #" + a.contestId + " answered: the leaves were proven"];
    case "ContestMoot": return ["contest #" + a.contestId + " moot: the round moved on"];
    case "BondReleased": return ["contest #" + a.contestId + " bond of ", eth(a.bondWei), " released to ", n(a.to)];
    case "Credited": return [n(a.to), ` credited ${eth(a.amountWei)} (claimable with claim)`];
    case "Claimed": return [n(a.to), ` claimed ${eth(a.amountWei)} of its credits`];
    case "Registered": return [n(a.node), ` registered with ${eth(a.stakeWei)} at ${a.endpoint}, serving ${a.models.length} model${a.models.length === 1 ? "" : "s"}`];
    case "StakeAdded": return [n(a.node), ` added ${eth(a.amountWei)}: stake now ${eth(a.stakeWei)}`];
    case "Deregistered": return [n(a.node), " unbonds: it may withdraw from ", block(a.unbondingEndBlock, body), " once no audit holds its stake"];
    case "Withdrawn": return [n(a.node), ` withdrew ${eth(a.amountWei)}: no longer registered`];
    case "EndpointUpdated": return [n(a.node), ` now serves at ${a.endpoint}`];
    case "ModelsUpdated": return [n(a.node), ` now serves ${a.models.length} model${a.models.length === 1 ? "" : "s"}: ${a.models.map(short).join(", ")}`];
    case "ModelAdded": return [`model ${short(a.modelId)} added: committed layers ${a.committedLayers.join(", ")}, ${a.fingerprintDims} fingerprint dims`];
    case "OmissionClaimed": return ["omission claim #" + a.claimId + " by ", n(a.claimant), ": dispatcher ", n(a.dispatcher), ` promised receipt ${short(a.receiptHash)} by block ${a.batchByBlock}; it proves the batch by block ${a.proveDeadline}`];
    case "OmissionAnswered": return ["omission claim #" + a.claimId + " answered: the receipt is leaf " + a.leafIndex + " of ", batchLink(a.batchId), `; ${eth(a.paidWei)} paid to the dispatcher, ${eth(a.refundedWei)} refunded`];
    case "OmissionSlashed": return ["omission claim #" + a.claimId + ": dispatcher ", n(a.dispatcher), ` never proved the promised batch: slashed ${eth(a.slashedWei)}`];
    case "StreamEquivocationSlashed": return ["worker ", n(a.worker), ` signed two streams of job ${short(a.jobHash)} (reported by `, n(a.reporter), `): slashed ${eth(a.slashedWei)}`];
    default: return [event.event + " " + JSON.stringify(a)];  // an event this page has no words for yet (wrapped by .what's CSS)
  }
}

const slashNode = (e) => (e.event === "PartySlashed" ? e.args.node : e.event === "Adjudicated" ? e.args.member : e.event === "ContestLost" ? e.args.party
                          : e.event === "DispatcherSlashed" ? e.args.dispatcher : null);

export function timeline(events, body, extra = []) {
  const items = extra.concat(events.map((event) => {
    const slashed = slashNode(event);
    return el("li", { "data-event": event.event, "data-focus": slashed ? "slash-" + slashed.toLowerCase() : null,
                      class: /Slashed|Adjudicated|ContestLost/.test(event.event) ? "slash" : "" },
      block(event.block, body), " ", el("span", { class: "what" }, describe(event, body)), " ", txLink(event.tx_hash));
  }));
  return el("ol", { id: "timeline", class: "timeline" }, items);
}

function who(step, body) {
  const w = step.who;
  if (w.parties) return w.parties.length ? w.parties.flatMap((p, i) => [i ? ", " : "", nodeLink(p)]) : "nobody left";
  return w.usually ? ["anyone — in practice the dispatcher, ", nodeLink(w.usually)] : "anyone";
}

export function nextStep(next, body) {
  if (!next) return null;
  const head = body.clock.head;
  return el("div", { class: "next", id: "next-step", "data-phase": next.phase, "data-phase-code": next.phase_code, "data-read-at": next.read_at_block },
    el("h3", {}, `What happens next (phase: ${next.phase}, read at block ${next.read_at_block})`),
    el("ol", {}, next.steps.map((step) => el("li", { "data-action": step.action, "data-by-block": step.by_block ?? "" },
      el("b", {}, who(step, body)), ": ", step.what,
      step.from_block !== null && step.from_block > head ? [" — from ", block(step.from_block, body)] : "",
      step.by_block !== null ? [" — by ", block(step.by_block, body), step.by_block < head ? el("span", { class: "vote-disagree" }, ` (overdue by ${head - step.by_block} blocks)`) : ""] : ""))),
    el("p", { class: "muted" }, "Then: ", next.then));
}

function seats(audit, body) {
  const rows = [];
  const conduct = (address) => audit.conduct[address.toLowerCase()] || {};
  const w = conduct(audit.worker);
  rows.push(el("tr", { "data-party": audit.worker.toLowerCase(), class: w.lie ? "caught" : "" },
    el("td", {}, nodeLink(audit.worker)), el("td", {}, "worker"), el("td", {}, "its receipt"),
    el("td", {}, audit.rounds.length && audit.rounds[0].worker_opened_block !== null ? block(audit.rounds[0].worker_opened_block, body) : "-"),
    el("td", {}, "-"), el("td", { class: "label" }, w.label || "-"), el("td", {}, w.slashed_wei ? eth(w.slashed_wei) : "-")));
  for (const round of audit.rounds) {
    for (const seat of round.members) {
      const c = conduct(seat.node);
      rows.push(el("tr", { "data-party": seat.node.toLowerCase(), class: c.lie ? "caught" : "" },
        el("td", {}, nodeLink(seat.node)),
        el("td", {}, seat.replaced ? `replaced (round ${round.round})` : `seat ${seat.slot + 1}, round ${round.round}`),
        el("td", {}, seat.receipt ? block(seat.receipt.block, body) : "-"),
        el("td", {}, seat.opening ? block(seat.opening.block, body) : "-"),
        // a sealed vote is hidden until every member has sealed: the page says it was cast, not what it is
        el("td", { class: "votes" }, !seat.opening && seat.seal ? el("span", { class: "sealed" }, "sealed")
          : vote({ vote: seat.opening ? seat.opening.vote : null, lie: c.lie, label: c.label })),
        el("td", { class: "label" + (c.lie ? " vote-disagree" : "") }, c.label || "-"),
        el("td", {}, c.slashed_wei !== null && c.slashed_wei !== undefined ? eth(c.slashed_wei) : "-")));
    }
  }
  return table(["party", "seat", "committed", "opened", "vote", "what it came to", "slashed"], rows, { id: "seats" });
}

function decisions(audit, body) {
  return audit.rounds.filter((r) => r.decided).map((r) =>
    el("p", {}, `Round ${r.round}: `, badge(r.decided.verdict), ` — ${r.decided.agree} agree, ${r.decided.disagree} disagree (a vote proven a lie does not count), `, block(r.decided.block, body)));
}

export function auditSection(audit, body) {
  return [nextStep(audit.next, body), section("Committee and votes", seats(audit, body), decisions(audit, body))];
}

// A deadline still to come shows its blocks and estimated seconds left (`block`, from the node's seconds
// per block); one passed waits for the permissionless call that moves the job on.
function estimate(number, body) {
  return number < body.head ? el("span", { class: "muted" }, " (passed: the next call moves it on)") : "";
}

export const jobPage = {
  title: ([hash]) => "Job " + short(hash),
  load: ([hash]) => api("jobs/" + hash),
  draw(body) {
    const audit = body.audit_detail;
    return [
      dl([["status", badge(body.status)], ["job hash", el("span", { class: "mono" }, body.job_hash)], ["worker", nodeLink(body.worker)],
          ["model", el("span", { class: "mono" }, short(body.model_id))], ["output tokens", body.output_tokens],
          ["receipt", el("span", { class: "mono" }, body.receipt_hash)],
          ["batch", body.batch && body.batch.batch_id !== null ? [batchLink(body.batch.batch_id), ` leaf ${body.batch.index}, posted in `, block(body.batch.posted_block, body)] : "not batched yet"],
          ["audit", body.audit ? [auditLink(body.audit.audit_id), " ", badge(audit ? audit.outcome : "open")] : "none (yet)"],
          ["this step ends", el("span", { id: "phase-ends", "data-deadline": body.phase_deadline ?? "", "data-block": body.phase_ends_block ?? "" },
            body.phase_ends_block !== null && body.phase_ends_block !== undefined ? [`${body.phase_deadline.replaceAll("_", " ")}: `, block(body.phase_ends_block, body), estimate(body.phase_ends_block, body)] : "-")],
          ["final at the latest", el("span", { id: "final-by", "data-block": body.final_by_block ?? "" },
            body.final_by_block !== null && body.final_by_block !== undefined ? [block(body.final_by_block, body), estimate(body.final_by_block, body)] : (body.status === "final" ? "final" : "-"))],
          ["dispatched", dateTime(body.created_at)]]),
      audit ? auditSection(audit, body) : null,
      section("Timeline", timeline(body.timeline, body, [el("li", { "data-event": "Receipt" }, el("span", { class: "block" }, "off-chain"), " receipt signed by ", nodeLink(body.worker))])),
      section("Evidence and replay",
        el("div", { id: "timeline-links" },
          el("a", { href: body.links.evidence, target: "_blank" }, "evidence (job, receipts, proven openings)"), " · ",
          el("a", { href: body.links.status, target: "_blank" }, "status JSON"), el("p", {}, "replay: ", el("code", {}, body.links.replay)))),
    ];
  },
};

export const auditPage = {
  title: ([id]) => "Audit #" + id,
  load: ([id]) => api("audits/" + id),
  draw(body) {
    return [
      dl([["outcome", badge(body.outcome)], ["worker", nodeLink(body.worker)], ["dispatcher", nodeLink(body.dispatcher)],
          ["job", body.job_hash ? jobLink(body.job_hash, body.job_hash) : el("span", { class: "muted" }, "dispatched by another node: only it knows the job hash")],
          ["receipt", el("span", { class: "mono" }, body.receipt_hash)], ["batch", [batchLink(body.batch.batch_id), ` leaf ${body.batch.index}`]],
          ["started", block(body.started_block, body)], ["ended", body.ended_block !== null ? block(body.ended_block, body) : "open"],
          ["output tokens", body.output_tokens ?? "not on-chain yet (a private draw shows the receipt with its reveal)"], ["requested by the client", body.requested ? "yes" : "no (drawn)"]]),
      auditSection(body, body),
      section("Timeline", timeline(body.timeline, body)),
    ];
  },
};

