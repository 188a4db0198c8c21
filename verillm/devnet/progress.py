"""What `verillm devnet` says while it waits: model conversion, node start-up, stalls.

A devnet that goes quiet for a minute looks hung; these helpers print a line for each long
step and, while following audits, say when nothing has moved for ``stall_s`` seconds and
why, from the gateway's own view (`GET /v1/verillm/dispatcher`: chain head, workers,
batches and audits by state, failing steps) and from each node's process state.
"""

import time
import urllib.error

from verillm.devnet.network import LocalNetwork, get_json

SMOLLM2_CACHE_NAME = "smollm2-135m-instruct-fp32"  # verillm.engine.models.load_smollm2's cache folder


def prepare_model(model: str, say) -> None:
    """Convert SmolLM2 once, here, with a line saying so, before N node processes race to do it."""
    if model != "smollm2":
        return
    from verillm.engine.models import convert_smollm2, get_cache_dir

    target = get_cache_dir() / SMOLLM2_CACHE_NAME
    if (target / "config.json").exists():
        say(f"SmolLM2-135M-Instruct: cached fp32 weights in {target}")
        return
    say(f"converting SmolLM2 once (GGUF → fp32 safetensors into {target}; about a minute on 2 cores)…")
    started = time.monotonic()
    convert_smollm2(target)
    say(f"converted SmolLM2 in {time.monotonic() - started:.0f} s; later runs load the cached copy")


class StallWatch:
    """Notices when the followed jobs stop changing and explains what the network is doing."""

    def __init__(self, net: LocalNetwork, say, stall_s: float = 60.0):
        self.net, self.say, self.stall_s = net, say, stall_s
        self.last_change = time.monotonic()
        self.last_state: object = None
        self.last_head: int | None = None
        self.reported_at = 0.0

    def check(self, state: object) -> None:
        """Call once per poll with anything that changes when the network makes progress."""
        now = time.monotonic()
        if state != self.last_state:
            self.last_state, self.last_change = state, now
            return
        if now - self.last_change >= self.stall_s and now - self.reported_at >= self.stall_s:
            self.reported_at = now
            self.say(f"no progress for {now - self.last_change:.0f} s: {self.explain()}")

    def explain(self) -> str:
        """One line: dead nodes, whether the chain mines, what the gateway waits on and what fails."""
        dead = [f"node {n.index} exited with code {n.process.returncode} (see {n.log_file})"
                for n in self.net.nodes if n.process is not None and n.process.poll() is not None]
        try:
            info = get_json(f"{self.net.gateway_url}/v1/verillm/dispatcher", 5.0)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            return "; ".join(dead + [f"the gateway does not answer ({exc})"])
        head = info.get("head")
        mining = "the chain is not producing blocks" if head == self.last_head else f"chain head {head}"
        self.last_head = head
        parts = dead + [mining, f"{len(info.get('workers', []))} active workers",
                        "batches " + _counts(info.get("batches", {})), "audits " + _counts(info.get("audits", {})),
                        f"{info.get('duties', 0)} duties pending"]
        failing = info.get("failing_steps") or {}
        if failing:
            parts.append("failing: " + "; ".join(f"{step}: {error}" for step, error in list(failing.items())[:3]))
        return ", ".join(parts)


def _counts(counts: dict) -> str:
    shown = [f"{state} {n}" for state, n in counts.items() if n]
    return " ".join(shown) or "none"
