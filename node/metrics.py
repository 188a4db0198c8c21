"""Every Prometheus metric the node exposes, in one place, with base units and _total names.

One `NodeMetrics` per app, on its own registry (several nodes can run in one process, as in
tests and the devnet). The worker side updates the job, token, latency and queue metrics;
the dispatcher role (audit scheduler, chain watcher) updates the audit, verdict, dispute and
stake metrics defined here. `ops/grafana-dashboard.json` and `ops/prometheus/alerts.yml`
use these names.
"""

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from verillm.errors import VerillmError

# Seconds; CPU tiny-model jobs take milliseconds, SmolLM2 on CPU seconds, long GPU jobs minutes.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
SLACK_BUCKETS_BLOCKS = (0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 600)
DUTY_KINDS = ("post_batch", "draw_audit", "start_audit", "open_worker", "seal_vote", "open_and_vote", "reveal_round", "post_batch", "answer_contest")

JOB_OUTCOMES = ("done", "failed")  # refusals before admission are counted by error code
VERDICTS = ("verified", "slashed", "member_slashed")
DISPUTE_OUTCOMES = ("opened", "upheld", "rejected")


def compute_error_codes() -> list[str]:
    """Return every error code a node can answer with (VerillmError codes and the HTTP-level ones)."""
    codes, pending = [], [VerillmError]
    while pending:
        cls = pending.pop()
        codes.append(cls.code)
        pending.extend(cls.__subclasses__())
    return sorted(set(codes) | {"not_found", "method_not_allowed", "request_too_large", "internal_error"})


@dataclass
class NodeMetrics:
    """The metrics of one node, registered on ``registry``."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self):
        r = self.registry
        self._worst_slack: dict[str, int] = {}
        # --- worker: jobs and tokens ---
        self.jobs = Counter("verillm_node_jobs", "Jobs finished, by outcome (done, failed).", ["outcome"], registry=r)
        self.input_tokens = Counter("verillm_node_input_tokens", "Input tokens of finished jobs, by outcome.", ["outcome"], registry=r)
        self.output_tokens = Counter("verillm_node_output_tokens", "Output tokens generated, by job outcome.", ["outcome"], registry=r)
        self.recovered_jobs = Counter("verillm_node_recovered_jobs", "Jobs found queued or running at startup and re-run.", registry=r)
        self.http_errors = Counter("verillm_node_http_errors", "Error responses, by error code.", ["code"], registry=r)
        self.openings = Counter("verillm_node_openings", "Openings answered.", registry=r)
        self.opened_cells = Counter("verillm_node_opened_cells", "Leaves opened, summed over openings.", registry=r)
        # --- worker: latency ---
        self.generation_seconds = Histogram("verillm_node_generation_seconds", "Engine time per batch (engine.run).", buckets=LATENCY_BUCKETS_S, registry=r)
        self.commit_seconds = Histogram("verillm_node_commit_seconds", "Commitment + receipt signing time per job.", buckets=LATENCY_BUCKETS_S, registry=r)
        self.job_seconds = Histogram("verillm_node_job_seconds", "Time from admission to durable receipt, per job.", buckets=LATENCY_BUCKETS_S, registry=r)
        self.opening_seconds = Histogram("verillm_node_opening_seconds", "Time to rebuild the tree and open cells, per opening.", buckets=LATENCY_BUCKETS_S, registry=r)
        self.batch_size = Histogram("verillm_node_batch_size_jobs", "Jobs per engine call.", buckets=BATCH_SIZE_BUCKETS, registry=r)
        # --- worker: state ---
        self.queue_depth = Gauge("verillm_node_queue_depth_jobs", "Jobs waiting for the engine.", registry=r)
        self.running_jobs = Gauge("verillm_node_running_jobs", "Jobs inside the engine right now.", registry=r)
        # --- dispatcher role (audits, verdicts, disputes, stake) ---
        self.audit_draws = Counter("verillm_dispatcher_audit_draws", "Audit draws evaluated, by whether the job was selected.", ["selected"], registry=r)
        self.verdicts = Counter("verillm_dispatcher_verdicts", "Audit verdicts reached, by verdict.", ["verdict"], registry=r)
        self.disputes = Counter("verillm_dispatcher_disputes", "Disputes, by outcome.", ["outcome"], registry=r)
        self.stake_wei = Gauge("verillm_node_stake_wei", "This node's stake in the Registry, in wei.", registry=r)
        self.slashed_wei = Counter("verillm_node_slashed_wei", "Stake this node lost to slashing, in wei.", registry=r)
        self.duty_slack_blocks = Histogram("verillm_node_duty_slack_blocks", "Blocks left in its window when a slashable duty's transaction landed, by duty.",
                                           ["kind"], buckets=SLACK_BUCKETS_BLOCKS, registry=r)
        self.duty_worst_slack_blocks = Gauge("verillm_node_duty_worst_slack_blocks", "Least slack (blocks) any duty of this kind landed with since start.", ["kind"], registry=r)
        self.duties_missed = Counter("verillm_node_duties_missed", "Slashable duties whose window closed before they landed, by duty.", ["kind"], registry=r)
        self.unbatched_receipts = Gauge("verillm_dispatcher_unbatched_receipts", "Receipts this dispatcher holds that no posted batch includes yet.", registry=r)
        self._initialise_label_sets()

    def _initialise_label_sets(self):
        # Export every known series at 0 so rate() and alerts work before the first event.
        for outcome in JOB_OUTCOMES:
            for metric in (self.jobs, self.input_tokens, self.output_tokens):
                metric.labels(outcome=outcome)
        for code in compute_error_codes():
            self.http_errors.labels(code=code)
        for selected in ("true", "false"):
            self.audit_draws.labels(selected=selected)
        for verdict in VERDICTS:
            self.verdicts.labels(verdict=verdict)
        for outcome in DISPUTE_OUTCOMES:
            self.disputes.labels(outcome=outcome)
        for kind in DUTY_KINDS:  # not the worst-slack gauge: a 0 there would read "landed in the last block"
            self.duties_missed.labels(kind=kind)
            self.duty_slack_blocks.labels(kind=kind)

    def on_duty_landed(self, kind: str, slack_blocks: int) -> None:
        """Count one duty's transaction landed with ``slack_blocks`` of its window left."""
        self.duty_slack_blocks.labels(kind=kind).observe(slack_blocks)
        worst = self._worst_slack.get(kind)
        if worst is None or slack_blocks < worst:
            self._worst_slack[kind] = slack_blocks
            self.duty_worst_slack_blocks.labels(kind=kind).set(slack_blocks)

    def on_job_finished(self, outcome: str, input_tokens: int, output_tokens: int) -> None:
        """Count one finished job and its tokens under ``outcome``."""
        self.jobs.labels(outcome=outcome).inc()
        self.input_tokens.labels(outcome=outcome).inc(input_tokens)
        self.output_tokens.labels(outcome=outcome).inc(output_tokens)
