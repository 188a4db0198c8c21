"""`verillm sim`: the network at scale, simulated over the project's protocol code (docs/simulation.md).

    verillm sim run --workers 10000 --hours 24 --strategy collude --rules issue-9   # one network
    verillm sim table --preset mainnet --json t.json                               # strategy × share × rules
    verillm sim cells --json c.json          # economics-check §2c/§2e cells, before and after
    verillm sim bounds --json b.json         # the §13 table and the paper's bounds, closed form vs simulated
    verillm sim plots --out docs/img         # the three plots
    verillm sim replay --audits 300          # simulated audits through the contracts on anvil
"""

import json

import click

from verillm.bench.tables import format_table, write_json

RUN_ROWS = ("jobs", "audits", "audits_unstartable", "cheated_served", "cheated_unslashed", "cheated_omitted_from_batches",
            "p_audited_cheat_escapes", "honest_slashed", "honest_slashed_eth", "honest_beyond_penalty_eth", "honest_no_answer_penalties",
            "honest_silent_penalty_eth", "adversary_silent_penalties", "adversary_appeals", "unkeepable_omissions",
            "adversary_profit_eth", "adversary_profit_per_identity_eth", "ev_per_cheated_job_eth", "detection_time_s",
            "audit_latency_s", "locked_stake_eth", "gas_per_job", "gas_per_audit", "largest_nodes_within_block_gas",
            "calls_per_block", "verification_share_gpu", "verification_share_cpu", "abandoned", "escalations", "wall_s")


@click.group()
def sim():
    """Simulate the network at scale over the spec's draws, sortition and settlement."""


@sim.command()
@click.option("--preset", default="mainnet", show_default=True)
@click.option("--rules", "rules_name", default="main", show_default=True,
              help="first-landing | issue-9 | member-penalty | before-coverage | before-issue-20 | before-issue-34 | main | issue-9-full (docs/simulation.md)")
@click.option("--workers", type=int, default=1000, show_default=True)
@click.option("--stake", type=click.Choice(["equal", "lognormal"]), default="equal", show_default=True)
@click.option("--adversary-share", type=float, default=0.1, show_default=True)
@click.option("--strategy", default="cheat-always", show_default=True,
              help="see docs/simulation.md (issue 34: appeal-griefer | appeal-hunter | settle-front-run | silent-sybils)")
@click.option("--attack", default="int8", show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True)
@click.option("--bound", type=click.Choice(["point", "pessimistic"]), default="point", show_default=True, help="measured rates or their 95% worst case")
@click.option("--jobs-per-s", type=float, default=10.0, show_default=True)
@click.option("--hours", type=float, default=24.0, show_default=True)
@click.option("--block-s", type=float, default=12.0, show_default=True)
@click.option("--offline", type=float, default=0.0, show_default=True)
@click.option("--outage-s", type=float, default=0.0, show_default=True, help="mean honest outage (s); 0: a contest is missed with --offline")
@click.option("--lazy-share", type=float, default=0.0, show_default=True)
@click.option("--job-cost-eth", type=float, default=1.7e-6, show_default=True)
@click.option("--saved-fraction", type=float, default=0.4, show_default=True)
@click.option("--batch-size", type=int, default=128, show_default=True)
@click.option("--self-dispatch", type=float, default=1.0, show_default=True)
@click.option("--no-block-gas-limit", is_flag=True, help="let startAudit exceed 30M gas (a cheaper sortition)")
@click.option("--gas-json", multiple=True, type=click.Path(exists=True, dir_okay=False), help="`verillm bench gas --json` reports")
@click.option("--set", "preset_sets", multiple=True, help="PARAM=INT: override a preset parameter (e.g. SLASH_REWARD_BPS=0)")
@click.option("--rule", "rule_sets", multiple=True, help="FLAG=VALUE: override a rule flag (e.g. omission_possible=false)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def run(preset, rules_name, workers, stake, adversary_share, strategy, attack, dtype, bound, jobs_per_s, hours, block_s, offline,
        outage_s, lazy_share, job_cost_eth, saved_fraction, batch_size, self_dispatch, no_block_gas_limit, gas_json, preset_sets, rule_sets, seed, json_path):
    """Simulate one network for --hours of simulated time."""
    from verillm.sim.engine import Scenario, run_scenario
    from verillm.sim.gas import load_gas_json

    scenario = Scenario(preset=preset, rules=rules_name, workers=workers, stake=stake, adversary_share=adversary_share,
                        strategy=strategy, attack=attack, dtype=dtype, detection_bound=bound, jobs_per_s=jobs_per_s,
                        duration_s=hours * 3600, block_s=block_s, offline=offline, outage_s=outage_s, lazy_share=lazy_share,
                        job_cost_eth=job_cost_eth, saved_fraction=saved_fraction, batch_size=batch_size,
                        self_dispatch=self_dispatch, enforce_block_gas_limit=not no_block_gas_limit,
                        preset_overrides=tuple(_assignment(a, int) for a in preset_sets),
                        rule_overrides=tuple(_assignment(a, _rule_value) for a in rule_sets), seed=seed)
    report = run_scenario(scenario, load_gas_json(gas_json) if gas_json else None, progress=True)
    click.echo(format_table(["metric", "value"], [[k, _fmt(report[k])] for k in RUN_ROWS]))
    write_json(json_path, report)


@sim.command()
@click.option("--preset", default="mainnet", show_default=True)
@click.option("--hours", type=float, default=6.0, show_default=True)
@click.option("--workers", type=int, default=1000, show_default=True)
@click.option("--jobs-per-s", type=float, default=2.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--rules", "rules_names", multiple=True, default=("before-coverage", "main"), show_default=True)
@click.option("--offline", type=float, default=0.0, show_default=True, help="honest members' (and contested workers') downtime")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def table(preset, hours, workers, jobs_per_s, seed, rules_names, offline, json_path):
    """Each strategy × adversary share (10, 33, 49%) × rule set: cheater EV, honest losses, detection latency."""
    from verillm.sim.tables import strategy_table

    cols = ["rules", "strategy", "q", "adversary_profit_per_identity_eth", "excess_per_identity_eth", "p_audited_cheat_escapes", "honest_slashed_events",
            "honest_slashed_eth", "detection_median_s"]
    click.echo("  ".join(cols), err=True)
    rows = strategy_table(preset, hours, workers, jobs_per_s, seed, rules=rules_names, offline=offline,
                          progress=lambda r: click.echo("  ".join(_fmt(r[c]) for c in cols), err=True))
    click.echo(format_table(cols, [[_fmt(r[c]) for c in cols] for r in rows]))
    write_json(json_path, {"preset": preset, "hours": hours, "workers": workers, "jobs_per_s": jobs_per_s, "offline": offline,
                           "rules": list(rules_names), "rows": rows})


@sim.command()
@click.option("--preset", default="mainnet", show_default=True)
@click.option("--hours", type=float, default=6.0, show_default=True)
@click.option("--workers", type=int, default=1000, show_default=True)
@click.option("--jobs-per-s", type=float, default=2.0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def fixes(preset, hours, workers, jobs_per_s, json_path):
    """Each positive-EV strategy before and after a proposed parameter or rule change."""
    from verillm.sim.tables import fix_table

    rows = fix_table(preset, hours, workers, jobs_per_s, progress=lambda r: click.echo(str(r), err=True))
    click.echo(format_table(list(rows[0]), [[_fmt(v) for v in r.values()] for r in rows]))
    write_json(json_path, {"preset": preset, "hours": hours, "workers": workers, "jobs_per_s": jobs_per_s, "rows": rows})


@sim.command()
@click.option("--audits", type=int, default=20_000, show_default=True)
@click.option("--nodes", type=int, default=1000, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def cells(audits, nodes, json_path):
    """economics-check §2c/§2e cells under both rule sets (audit-level Monte Carlo)."""
    from verillm.sim.tables import cheat_cells, grief_cells, liveness_cells

    out = {"cheat": cheat_cells(audits, nodes), "grief": grief_cells(audits, nodes), "liveness": liveness_cells(audits, nodes)}
    for name, rows in out.items():
        click.echo(f"\n{name}")
        click.echo(format_table(list(rows[0]), [[_fmt(v) for v in r.values()] for r in rows]))
    write_json(json_path, {"audits": audits, "nodes": nodes, **out})


@sim.command()
@click.option("--audits", type=int, default=20_000, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def bounds(audits, json_path):
    """The §13 table and the paper's E.1/E.2 bounds: closed form against the simulator."""
    from verillm.sim.bounds import bounds_table, section13_table

    out = {"section13": section13_table(audits), "bounds": bounds_table(audits)}
    for name, rows in out.items():
        click.echo(f"\n{name}")
        click.echo(format_table(list(rows[0]), [[_fmt(v) for v in r.values()] for r in rows]))
    write_json(json_path, {"audits": audits, **out})


@sim.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="docs/img", show_default=True)
@click.option("--cells-json", type=click.Path(exists=True, dir_okay=False), default=None, help="reuse `sim cells --json`")
@click.option("--hours", type=float, default=24.0, show_default=True)
def plots(out_dir, cells_json, hours):
    """Cheater profit over time, detection against adversary stake, locked stake."""
    from pathlib import Path

    from verillm.sim.engine import Scenario, run_scenario
    from verillm.sim.plots import plot_detection, plot_locked, plot_profit
    from verillm.sim.tables import cheat_cells

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    runs = {}
    for rules, strategies in PLOT_RUNS:
        for strategy in strategies:
            sc = Scenario(rules=rules, strategy=strategy, adversary_share=0.2, workers=1000, jobs_per_s=2, duration_s=hours * 3600)
            runs[f"{strategy} / {rules}"] = run_scenario(sc)
    plot_profit(runs, Path(out_dir) / "sim-profit.png")
    plot_locked({k: v for k, v in runs.items() if k.startswith("collude")}, Path(out_dir) / "sim-locked.png")
    # the cells JSON (older rule sets) plus main's cells, computed here
    rows = json.loads(Path(cells_json).read_text())["cheat"] if cells_json else cheat_cells(2000, 1000)
    rows = [r for r in rows if r["rules"] != "main"] + (cheat_cells(2000, 1000, rules=("main",)) if cells_json else [])
    plot_detection(rows, Path(out_dir) / "sim-detection.png")
    click.echo(f"wrote {out_dir}/sim-profit.png, sim-detection.png, sim-locked.png")


@sim.command()
@click.option("--audits", type=int, default=300, show_default=True)
@click.option("--omissions", type=int, default=20, show_default=True,
              help="omission claims after the audits (Coverage: claimOmitted, then slashOmission or proveIncluded)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def replay(audits, omissions, seed, json_path):
    """Replay simulated audits and omission claims (rules: main, preset: minimal) through the
    contracts on anvil and compare committees, verdicts, slashes and credits; exits 1 on any mismatch."""
    from verillm.chain import RpcChain
    from verillm.chain.anvil import AnvilProcess
    from verillm.sim.replay import run_replay

    def progress(r):
        if r.mismatches or (r.case.index + 1) % 25 == 0:
            click.echo(f"  case {r.case.index + 1}/{audits + omissions} ({r.case.kind}): {'; '.join(r.mismatches) or 'agree'}", err=True)

    with AnvilProcess() as anvil:
        results, rows = run_replay(RpcChain(anvil.url), audits, seed, progress, omissions=omissions)
    click.echo(format_table(list(rows[0]), [[_fmt(v) for v in r.values()] for r in rows]))
    mismatched = [{"case": r.case.index, "kind": r.case.kind, "mismatches": r.mismatches} for r in results if r.mismatches]
    claims = [r for r in results if r.case.kind.startswith("omission-")]
    audited = [r for r in results if not r.case.kind.startswith("omission-")]
    click.echo(f"{sum(not r.mismatches for r in audited)}/{len(audited)} audits agree; {sum(r.committees for r in audited)} committees compared")
    click.echo(f"{sum(not r.mismatches for r in claims)}/{len(claims)} omission claims agree "
               f"({sum(r.omission_slashed for r in claims)} dispatchers slashed by slashOmission)")
    write_json(json_path, {"audits": audits, "omissions": omissions, "seed": seed, "rules": "main", "preset": "minimal", "rows": rows,
                           "mismatched": mismatched})
    if mismatched:
        raise SystemExit(1)


PLOT_RUNS = (
    ("first-landing", ("collude", "stake-grind", "dispatcher-reroll", "cheat-unwatched")),
    ("issue-9", ("collude", "dispatcher-reroll", "cheat-unwatched")),
    ("before-coverage", ("cheat-unwatched",)),
    ("main", ("collude", "dispatcher-reroll", "cheat-unwatched", "escalate-unheard")),
)


def _assignment(text: str, convert) -> tuple:
    from verillm.errors import ConfigError

    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name.strip(), convert(value.strip())
    except ValueError as exc:
        raise ConfigError(f"bad value in {text!r}: {exc}") from exc


def _rule_value(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return int(text)


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in value.items()})
    if value is None:
        return "-"
    return str(value)
