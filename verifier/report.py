"""Readable reports: the replay of one audit, and the consistency audit of a whole chain.

A replay report answers "where and by how much did the hidden states diverge, and why was
the job accepted or rejected": one row per challenged position with the fingerprint error at
each committed layer against that layer's threshold, the token check, then per-layer
statistics and the verdict with every reason. docs/auditors.md explains how to read it.
"""

from verillm.spec.compare import compute_cell_error
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

OK, BAD = "ok", "OVER"


def _hex(value: bytes, digits: int = 12) -> str:
    return "0x" + value.hex()[:digits] + "…"


NOT_READ = "not read (no --rpc-url)"


def format_replay(replay, chain: "AuditOutcome | str" = NOT_READ) -> str:
    """Return the full replay report of a `verillm.verifier.replay.Replay`, ending with what the chain
    decided for that audit: ``chain`` its outcome (`verifier.chain_outcome.read_audit_outcome`), or a
    line saying why it was not read."""
    lines = _header(replay) + [""] + _cell_table(replay) + [""] + _layer_table(replay) + [""] + _token_lines(replay)
    return "\n".join(lines + [""] + _verdict_lines(replay) + [""] + _chain_lines(replay, chain))


def _chain_lines(replay, chain) -> list[str]:
    from verillm.verifier.chain_outcome import format_agreement, format_chain_decision

    if replay.case.audit_id is None:
        return ["chain decision: none (the evidence names no on-chain audit)"]
    if isinstance(chain, str):
        return [f"chain decision: {chain}"]
    accepts = replay.result.accepted and not replay.signature.startswith("INVALID")
    return (["chain decision (verillm/spec/outcome.py over the audit's events, as `verillm audit chain` reads them):"]
            + format_chain_decision(chain) + [format_agreement(chain, replay.case.round, accepts)])


def _header(replay) -> list[str]:
    case, manifest = replay.case, replay.manifest
    where = f"audit #{case.audit_id}, round {case.round}" if case.audit_id is not None else "no on-chain audit"
    return [
        f"Replay of job 0x{case.receipt.job_hash.hex()} ({where})",
        f"  model        {replay.model_name} ({manifest.dtype}), model id {_hex(case.receipt.model_id)}, committed layers {list(manifest.committed_layers)}",
        f"  worker       0x{case.receipt.worker.hex()}; receipt signature {replay.signature}",
        f"  job          {case.prompt_len} prompt tokens, {len(case.output_tokens)} output tokens (max {case.job.max_new_tokens}), "
        f"temperature {case.job.sampling.temperature_milli / 1000:g}, seed {case.job.sampling.seed}",
        f"  challenge    seed {_hex(case.challenge_seed)}: {len(replay.challenge.positions)} positions × {len(replay.challenge.layers)} layers, "
        f"token check at {len(replay.challenge.token_positions)} positions",
        f"  recompute    reference TorchEngine prefill of {case.prompt_len + len(case.output_tokens)} tokens in {replay.prefill_s:.2f} s",
        f"  profile      {replay.profile.model}/{replay.profile.dtype} ({replay.profile.provenance.get('command', 'no provenance')})",
    ]


def _cell_table(replay) -> list[str]:
    """One row per challenged position: the error at every layer against its threshold, and the token check."""
    layers, prompt_len = replay.challenge.layers, replay.case.prompt_len
    head = f"  {'position':>8} {'out#':>4} {'token':>7}  " + "  ".join(f"{'layer ' + str(l):>18}" for l in layers) + "  token check"
    rows = ["fingerprint error per challenged cell: ‖f_worker − f_replay‖/√d, against the layer's max cell error", head]
    for position in sorted(set(replay.challenge.positions) | set(p for p in replay.challenge.token_positions if p < prompt_len - 1 + len(replay.case.output_tokens))):
        index = position - prompt_len + 1
        token = replay.case.output_tokens[index] if 0 <= index < len(replay.case.output_tokens) else "-"
        cells = "  ".join(f"{_cell_text(replay, position, l):>18}" for l in layers)
        rows.append(f"  {position:>8} {index:>4} {token!s:>7}  {cells}  {_token_text(replay, position, layers[-1])}")
    return rows


def _cell_text(replay, position: int, layer: int) -> str:
    worker, mine = replay.worker_cells.get((position, layer)), replay.replay_cells.get((position, layer))
    if worker is None or mine is None:
        return "-"
    error = compute_cell_error(worker, mine)
    threshold = replay.profile.for_layer(layer).max_cell_error
    return f"{error:.2e} {OK if error <= threshold else BAD}"


def _token_text(replay, position: int, last_layer: int) -> str:
    leaf = replay.replay_cells.get((position, last_layer))
    if leaf is None:
        return "-"
    return "within margin" if leaf.flags & FLAG_NEXT_WITHIN_MARGIN else "OUTSIDE margin"


def _layer_table(replay) -> list[str]:
    measurement = replay.result.measurement
    if measurement is None:
        return ["layer statistics: none (the worker's opening did not prove against its receipt)"]
    rows = ["layer statistics (measurement) against the profile's thresholds (policy)",
            f"  {'layer':>5} {'cells':>5}  {'max error':>10} {'at pos':>6} {'threshold':>10}  {'RMS':>10} {'threshold':>10}"]
    for stats in measurement.layers:
        tolerance = replay.profile.for_layer(stats.layer)
        rms_applies = stats.cells >= replay.profile.min_cells_for_rms
        rms_threshold = f"{tolerance.rms_error:.2e}" if rms_applies else f"(<{replay.profile.min_cells_for_rms} cells)"
        rows.append(f"  {stats.layer:>5} {stats.cells:>5}  {stats.max_error:>10.2e} {stats.max_error_position:>6} {tolerance.max_cell_error:>10.2e}  "
                    f"{stats.rms_error:>10.2e} {rms_threshold:>10}")
    return rows


def _token_lines(replay) -> list[str]:
    measurement = replay.result.measurement
    if measurement is None:
        return []
    tokens = measurement.tokens
    output = replay.case.output_tokens
    stop = "the output reached max_new_tokens or ended with a stop token"
    if tokens.stopped_early:
        stop = "the output stopped early without a stop token; the replay's sampler " + ("would stop there too" if tokens.member_would_stop else "would NOT stop there")
    final = replay.replay_cells.get((replay.case.prompt_len + len(output) - 1, replay.challenge.layers[-1]))
    flagged = bool(final is not None and final.flags & FLAG_STOP_WITHIN_MARGIN)
    return [f"token check: {tokens.checked - len(tokens.disputed_output_indices)}/{tokens.checked} output tokens within the replay sampler's margin"
            + (f"; outside: {list(tokens.disputed_output_indices)}" if tokens.disputed_output_indices else ""),
            f"stop check: {stop} (stop token within margin at the end: {'yes' if flagged else 'no'})"]


def _verdict_lines(replay) -> list[str]:
    result = replay.result
    if result.accepted and not replay.signature.startswith("INVALID"):
        return ["verdict: ACCEPT — every challenged cell is within its layer's band and every output token is the sampler's (up to near-ties)"]
    lines = ["verdict: REJECT"]
    if replay.signature.startswith("INVALID"):
        lines.append(f"  - signature: the receipt's signature is {replay.signature}")
    lines += [f"  - {reason.kind}: {reason.detail}" for reason in result.reasons]
    return lines


def format_chain_audit(findings: list, summary: dict, states: dict[int, str] | None = None, caught: list[str] | None = None) -> str:
    """Return the chain audit report: every audit's state, who the contracts caught, what was checked, and every inconsistency found."""
    lines = ["Chain audit: " + ", ".join(f"{v} {k}" for k, v in summary.items())]
    if states:
        lines += ["", "audits:"] + [f"  audit {audit_id}: {state}" for audit_id, state in sorted(states.items())] + [""]
    if caught is not None:
        lines += ["caught (slashed by the contracts; each rule re-derived above):"] + [f"  {line}" for line in caught or ["nobody"]] + [""]
    problems = [f for f in findings if f.severity == "inconsistent"]
    notes = [f for f in findings if f.severity == "note"]
    lines += [f"  checked: {f.subject}: {f.detail}" for f in findings if f.severity == "ok"]
    if notes:
        lines += ["", "notes (could not be checked, not an inconsistency):"] + [f"  - {f.subject}: {f.detail}" for f in notes]
    lines += ["", f"inconsistencies: {len(problems)}"] + [f"  - {f.subject}: {f.detail}" for f in problems]
    return "\n".join(lines)
