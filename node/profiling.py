"""Where the daemon's event-loop thread spends its CPU, by component (`verillm bench node --profile`).

Off unless the node is started with ``VERILLM_NODE_PROFILE=<path>``: then SIGUSR1 toggles a
profiler on the event-loop thread (the thread that parses HTTP, decodes JSON, writes SQLite,
batches, builds responses; the engine thread runs the same engine + commit + sign as any
worker and is not profiled). The second SIGUSR1 writes ``<path>`` (JSON, written whole then
renamed) and stops; ``<path>.started`` appears once the profiler runs. Nothing is installed, and nothing costs anything, without the variable.

Attribution: every CPU interval between two profiler events (calls and returns, Python and
C) is charged to the nearest enclosing *component root* (`COMPONENT_ROOTS`: the node's own
functions for each step of a request), else by the module of the running Python code
(aiohttp, asyncio, other). Intervals are measured with the thread's CPU clock and the
profiler's own time between events is left out, so the sum tracks the thread's unprofiled
CPU (the bench prints both); a coroutine is charged only while it runs, not while it awaits.
"""

import importlib
import json
import logging
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path

from verillm import envs

log = logging.getLogger(__name__)

PROFILE_ENV = envs.NODE_PROFILE

COMPONENT_ROOTS = {
    "json decode + depth guard": ["verillm.jsonsafe:load_json"],
    "request parse + job build": [
        "verillm.node.api.openai_format:parse_completion_request",
        "verillm.node.api.openai_format:parse_chat_request",
        "verillm.node.api.openai_views:new_request_job",
        "verillm.node.worker.engines:verify_model_name",
    ],
    "job hash": ["verillm.spec.job:compute_job_hash"],
    "admission checks": ["verillm.node.worker.worker:Worker.verify_admission"],
    "sqlite reads": ["verillm.node.store.store:Store.get_job", "verillm.node.store.store:Store.get_receipt"],
    "sqlite writes (synchronous=NORMAL)": [
        "verillm.node.store.store:Store.insert_dispatched",
        "verillm.node.store.store:Store.insert_job",
        "verillm.node.store.store:Store.mark_running",
    ],
    "sqlite receipt commit (synchronous=FULL)": ["verillm.node.store.store:Store.record_outcomes"],
    "engine queue, batching, thread handoff": [
        "verillm.node.worker.engine_queue:EngineQueue.submit",
        "verillm.node.worker.engine_queue:EngineQueue._take_batch",
        "verillm.node.worker.engine_queue:EngineQueue._run",
        "verillm.node.worker.worker:Worker._start",
        "verillm.node.worker.worker:Worker._finish",
    ],
    "response build (text, receipt JSON, read token)": [
        "verillm.node.api.openai_views:_compute_reply",
        "verillm.node.api.openai_format:compute_completion_body",
        "verillm.node.api.openai_format:compute_chat_body",
    ],
    "response JSON encode": ["aiohttp.web_response:json_response"],
    "handler glue (dispatch, status URL)": ["verillm.node.api.openai_views:post_completions", "verillm.node.api.openai_views:post_chat_completions"],
}
"""Component → the functions whose whole run (minus nested roots of other components) is its cost."""

MODULE_COMPONENTS = (
    ("/aiohttp/", "aiohttp HTTP parse, routing, write"),
    ("/asyncio/", "asyncio event loop"),
    ("/selectors.py", "asyncio event loop"),
    ("/prometheus_client/", "metrics (prometheus)"),
)
"""Where no root encloses the running code: its module decides (the node's middlewares fall in `OTHER`)."""
OTHER = "other"


def _resolve(root: str):
    module_name, qualname = root.split(":")
    value = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part)
    value = getattr(value, "__wrapped__", value)  # decorated middlewares keep their function here
    return value.__code__


def compute_root_codes() -> dict:
    """Return {code object: component} for every root in `COMPONENT_ROOTS`."""
    return {_resolve(root): component for component, roots in COMPONENT_ROOTS.items() for root in roots}


def _module_component(code) -> str:
    for marker, component in MODULE_COMPONENTS:
        if marker in code.co_filename:
            return component
    return OTHER


class LoopProfiler:
    """A `sys.setprofile` hook charging CPU intervals to components and to functions (self time)."""

    def __init__(self, root_codes: dict):
        self.root_codes = root_codes
        self.components: dict[str, float] = defaultdict(float)
        self.component_events: dict[str, int] = defaultdict(int)
        self.functions: dict[str, float] = defaultdict(float)
        self.function_events: dict[str, int] = defaultdict(int)
        self._names: dict = {}
        self._stack: list[tuple[object, str]] = []  # (frame, component) of the roots now running
        self._current = ("", OTHER)  # (function, component) the next interval is charged to
        self._mark = 0.0
        self.cpu_started = self.wall_started = 0.0
        self.events = 0

    def start(self) -> None:
        """Profile this thread from now on."""
        self.cpu_started, self.wall_started = time.thread_time(), time.perf_counter()
        self._mark = time.thread_time()
        sys.setprofile(self._hook)

    def stop(self) -> dict:
        """Stop profiling; return the report, each interval less the calibrated per-event bias."""
        sys.setprofile(None)
        thread_cpu_s, wall_s = time.thread_time() - self.cpu_started, time.perf_counter() - self.wall_started
        bias_s = compute_event_bias_s(self.root_codes)

        def corrected(times: dict, events: dict) -> dict:
            values = {k: max(0.0, v - events[k] * bias_s) for k, v in times.items()}
            return {k: round(v, 6) for k, v in sorted(values.items(), key=lambda kv: -kv[1])}

        components = corrected(self.components, self.component_events)
        return {
            "thread_cpu_s": round(thread_cpu_s, 6),
            "wall_s": round(wall_s, 6),
            "charged_cpu_s": round(sum(self.components.values()), 6),
            "corrected_cpu_s": round(sum(components.values()), 6),
            "events": self.events,
            "event_bias_s": bias_s,
            "components": components,
            "functions": dict(list(corrected(self.functions, self.function_events).items())[:40]),
        }

    def _hook(self, frame, event, arg) -> None:
        now = time.thread_time()
        name, component = self._current
        self.components[component] += now - self._mark
        self.component_events[component] += 1
        self.functions[name] += now - self._mark
        self.function_events[name] += 1
        self.events += 1
        if event == "call":
            root = self.root_codes.get(frame.f_code)
            if root is not None:
                self._stack.append((frame, root))
            self._current = (self._name(frame.f_code), self._component(frame.f_code))
        elif event == "return":
            if self._stack and self._stack[-1][0] is frame:
                self._stack.pop()
            caller = frame.f_back
            self._current = (self._name(caller.f_code), self._component(caller.f_code)) if caller else ("", OTHER)
        elif event == "c_call":
            self._current = (f"{getattr(arg, '__qualname__', arg)} (C)", self._component(frame.f_code))
        else:  # c_return, c_exception
            self._current = (self._name(frame.f_code), self._component(frame.f_code))
        self._mark = time.thread_time()

    def _component(self, code) -> str:
        return self._stack[-1][1] if self._stack else _module_component(code)

    def _name(self, code) -> str:
        name = self._names.get(code)
        if name is None:
            name = self._names[code] = f"{Path(code.co_filename).name}:{code.co_qualname}"
        return name


def _calibration_work() -> int:
    return len(())


def _calibration_loop(rounds: int) -> None:
    for _ in range(rounds):
        _calibration_work()


def compute_event_bias_s(root_codes: dict, rounds: int = 20_000) -> float:
    """Return the CPU seconds each profiler event adds to the interval it closes, measured on this thread.

    The hook leaves its own body out of every interval, but not the interpreter's work of
    entering and leaving it: a loop of calls is timed without and with a profiler, and the
    difference per event is that residue (the calibration of the stdlib's `profile`).
    """
    started = time.thread_time()
    _calibration_loop(rounds)
    bare_s = time.thread_time() - started
    probe = LoopProfiler(root_codes)
    probe.start()
    _calibration_loop(rounds)
    sys.setprofile(None)
    return max(0.0, (sum(probe.components.values()) - bare_s) / max(1, probe.events))


def install_profile_toggle(loop) -> bool:
    """If ``VERILLM_NODE_PROFILE`` is set, make SIGUSR1 start/stop the loop-thread profiler; return whether it did."""
    path = envs.get_node_profile_path()
    if not path:
        return False
    root_codes = compute_root_codes()
    state: dict = {}

    def toggle() -> None:
        profiler = state.pop("profiler", None)
        if profiler is None:
            Path(path).unlink(missing_ok=True)
            state["profiler"] = LoopProfiler(root_codes)
            state["profiler"].start()
            Path(path + ".started").touch()  # the bench sends its jobs once this exists
            return
        report = profiler.stop()
        Path(path + ".started").unlink(missing_ok=True)  # a next start signals afresh
        partial = Path(path + ".partial")
        partial.write_text(json.dumps(report, indent=2) + "\n")
        partial.replace(path)
        log.warning("loop-thread profile written to %s", path)

    loop.add_signal_handler(signal.SIGUSR1, toggle)
    log.warning("%s is set: SIGUSR1 starts and stops the loop-thread profiler", PROFILE_ENV)
    return True
