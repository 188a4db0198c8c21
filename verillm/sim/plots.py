"""The simulation's plots (matplotlib, Agg backend, small PNGs)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from verillm.sim.bounds import tail  # noqa: E402

DPI = 80
LINE_STYLES = {"first-landing": "-", "main": ":"}
"""Detection plot: solid first landing, dotted main, dashed the other rule sets."""


def plot_profit(runs: dict, path) -> None:
    """Cheater profit (ETH, all identities) over simulated time, one line per run."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more lines than the default 10 colours
    for label, r in runs.items():
        ax.plot([t / 3600 for t in r["series"]["time_s"]], r["series"]["cheater_profit_eth"], label=label)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("adversary profit (ETH)")
    ax.set_yscale("symlog", linthresh=1)
    ax.legend(fontsize=7)
    ax.set_title("Cheater profit over time", fontsize=10)
    _save(fig, path)


def plot_detection(rows: list[dict], path) -> None:
    """P(an audited cheat is not slashed) against adversary stake share, per strategy and rule set,
    with the closed-form binomial tail of the §13 table (m = 3)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
    keys = sorted({(r["strategy"], r["rules"]) for r in rows})
    for strategy, rules in keys:
        pts = sorted((r["q"], r["not_slashed"]) for r in rows if r["strategy"] == strategy and r["rules"] == rules)
        ax.plot([p[0] for p in pts], [max(p[1], 1e-5) for p in pts], marker="o", ms=3,
                ls=LINE_STYLES.get(rules, "--"), label=f"{strategy} / {rules}")
    qs = [i / 100 for i in range(1, 50)]
    ax.plot(qs, [tail(3, q) for q in qs], color="black", lw=1, label="closed form, m = 3")
    ax.set_yscale("log")
    ax.set_ylim(1e-5, 1.5)
    ax.set_xlabel("adversary stake share q")
    ax.set_ylabel("P(audited cheat not slashed)")
    ax.legend(fontsize=6, ncol=2)
    ax.set_title("Detection against adversary stake (MAINNET)", fontsize=10)
    _save(fig, path)


def plot_locked(runs: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for label, r in runs.items():
        ax.plot([t / 3600 for t in r["series"]["time_s"]], r["series"]["locked_eth"], label=label)
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("stake locked by audits (ETH)")
    ax.legend(fontsize=7)
    ax.set_title("Locked stake over time", fontsize=10)
    _save(fig, path)


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
