"""Routing client jobs to registered workers: the `Dispatcher` of a networked node.

Workers come from the Registry: the active nodes serving the job's model (this node
included), with the endpoints they registered. Jobs go round-robin, as signed envelopes over
the native job API (`PeerClient`), or straight to this node's own worker. A worker's answer is
kept only if its receipt is signed by that worker for this deployment and binds the job and
the output. Anything else a worker does — no answer, an error status, a malformed or oversized
body, a bad receipt — is that worker's failure: the job goes to the next worker, and the failed
one is benched (`WorkerHealth`: tried after every other worker, for a time that doubles with
each failure in a row). A worker that is full (429 `rate_limited`, 503 `queue_full`) has not
failed: the job goes to the next worker and the full one is tried after the others for
BUSY_BACKOFF_S, never benched, its failures in a row untouched (issue 35: an honest worker full
of this gateway's own client jobs was benched as if it had failed).

This gateway keeps at most `dispatcher.client_jobs_per_worker` client jobs in flight at any one
other worker: the rest of its sender's share there (`limits.max_jobs_per_sender`) stays free for
its committee jobs, which go on a session and connections of their own (`duty_session`) with no
such cap, so its clients' load can never make a worker refuse or queue its committee job behind
them (docs/protocol.md §12 "Duties first"). The worker sees one sender's jobs either way.
each failure in a row). A streamed job's chunks are relayed only once the worker's signature over
the prefix holds (node/dispatcher/peer.py); a worker that stalls a stream (no first token within
`stream_first_token_s`, silence past `stream_idle_s`) or streams what it did not sign gets a
strike, and its bench grows with every strike, which no success resets (`WorkerHealth.on_strike`).
A receipt that contradicts a prefix its worker signed is equivocation: the evidence goes to
`on_equivocation` (the service slashes on-chain, Coverage.slashStreamEquivocation).
The worker's own words never reach the client: they go to this node's
log (truncated), and the client sees which workers failed and each failure's error code. A kept
answer is durable (`dispatch_jobs`) before it is returned: the batcher posts its receipt and the
audit scheduler may audit it.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from web3 import Web3

from verillm.spec.receipt import verify_receipt_binding
from verillm.errors import BadResponse, InvalidProof, InvalidSignature, QueueFull, TooManyRequests, VerillmError
from verillm.spec.delivery import verify_transcript_bound
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain, verify_receipt_signature
from verillm.spec.stream import Equivocation, SignedPrefix, is_prefix_contradicted
from verillm.spec.types import Job, Receipt

from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.keys import NodeKey
from verillm.node.dispatcher.local import run_local_job
from verillm.node.dispatcher.peer import BadStream, PeerClient, StreamLimits, StreamStalled, WorkerReply
from verillm.node.dispatcher.readiness import compute_needed_workers
from verillm.node.store.store import Store
from verillm.node.worker.stream_signer import OnChunk
from verillm.node.worker.worker import JobResult, Worker

log = logging.getLogger(__name__)

# Everything a worker can do wrong, after which the next worker gets the job: down, overloaded,
# broken, refusing, answering junk or a receipt that does not hold (every VerillmError a peer's
# answer maps to, BadResponse for a malformed or oversized one).
WORKER_FAILURES = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, VerillmError)
WORKER_BUSY = (TooManyRequests, QueueFull)
"""A full worker's refusals (429, 503 queue_full): retried elsewhere, never a failure."""
BUSY_BACKOFF_S = 1.0
"""How long a worker that answered full is tried after the others (not doubled, not a failure)."""
CLIENT_JOBS_PER_WORKER = 12
"""Default of `dispatcher.client_jobs_per_worker`: 4 below the default `limits.max_jobs_per_sender` (16)."""
BENCH_BASE_S = 10.0
"""How long a worker that just failed a job is tried after every other one; doubles per failure in a row."""
BENCH_MAX_S = 600.0
STRIKE_BENCH_BASE_S = 60.0
"""How long a worker that stalled a stream or streamed unsigned tokens sits out after its first strike;
doubles with each strike (never reset by a success: a stall costs every client routed to it a wait)."""
STRIKE_BENCH_MAX_S = 86_400.0
LOGGED_DETAIL_CHARS = 200
"""How much of a worker's own error text this node logs (its clients never see it)."""


class NoWorkers(QueueFull):
    """Too few registered workers serve the model for its jobs to be audited."""

    code = "no_workers"


class NoWorkerCompleted(QueueFull):
    """Every worker tried failed the job (each failure named by its error code); retry later."""

    code = "no_worker_completed"


class StreamBroken(VerillmError):
    """The worker streaming a job failed after some of its tokens went out: the stream ends here,
    since another worker's text is never spliced onto it (the client retries the whole request)."""

    code = "worker_failed_mid_stream"
    http_status = 502


class StreamEquivocation(BadStream):
    """A worker's receipt contradicts a prefix it signed while streaming: two outputs for one job."""

    code = "stream_equivocation"

    def __init__(self, message: str, evidence: Equivocation):
        super().__init__(message)
        self.evidence = evidence


class WorkerHealth:
    """Failures in a row per worker; a worker with any is benched for BENCH_BASE_S · 2^(n−1) seconds.
    Strikes (a stalled or forged stream) count apart and never reset: STRIKE_BENCH_BASE_S · 2^(k−1)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.failures: dict[bytes, int] = {}
        self.strikes: dict[bytes, int] = {}
        self.benched_until: dict[bytes, float] = {}
        self.busy_until: dict[bytes, float] = {}

    def on_strike(self, address: bytes) -> None:
        """A stalled or forged stream: benched for longer each time, whatever it answers in between."""
        count = self.strikes.get(address, 0) + 1
        self.strikes[address] = count
        until = self.clock() + min(STRIKE_BENCH_MAX_S, STRIKE_BENCH_BASE_S * 2 ** (count - 1))
        self.benched_until[address] = max(until, self.benched_until.get(address, 0.0))

    def on_failure(self, address: bytes) -> None:
        count = self.failures.get(address, 0) + 1
        self.failures[address] = count
        self.benched_until[address] = self.clock() + min(BENCH_MAX_S, BENCH_BASE_S * 2 ** (count - 1))

    def on_busy(self, address: bytes) -> None:
        """A full worker (429, 503 queue_full): tried after the others for BUSY_BACKOFF_S; not a failure."""
        self.busy_until[address] = self.clock() + BUSY_BACKOFF_S

    def on_success(self, address: bytes) -> None:
        self.failures.pop(address, None)
        if address not in self.strikes:  # a strike's bench runs its course
            self.benched_until.pop(address, None)
        self.busy_until.pop(address, None)

    def is_benched(self, address: bytes) -> bool:
        return self.benched_until.get(address, 0.0) > self.clock()

    def is_busy(self, address: bytes) -> bool:
        return self.busy_until.get(address, 0.0) > self.clock()

    def compute_order(self, entries: list) -> list:
        """``entries``: the ready workers, then the busy ones, then the benched ones (tried only when all others failed)."""
        benched = [e for e in entries if self.is_benched(e.address)]
        busy = [e for e in entries if self.is_busy(e.address) and e not in benched]
        return [e for e in entries if e not in benched and e not in busy] + busy + benched


def compute_failure_code(exc: BaseException) -> str:
    """What a client may see of a worker's failure: our own error code, or the transport error's class."""
    return exc.code if isinstance(exc, VerillmError) else type(exc).__name__


@dataclass(frozen=True)
class WorkerEntry:
    """An active registered node serving a model."""

    address: bytes
    url: str
    stake_wei: int


class RegistryView:
    """The Registry's active workers for one model, refreshed at most every ``refresh_s``."""

    def __init__(self, chainio: ChainIO, model_id: bytes, refresh_s: float):
        self.chainio, self.model_id, self.refresh_s = chainio, model_id, refresh_s
        self.workers: list[WorkerEntry] = []
        self.refreshed_at = 0.0
        self._lock = asyncio.Lock()

    async def refresh(self, force: bool = False) -> list[WorkerEntry]:
        async with self._lock:
            if force or time.monotonic() - self.refreshed_at >= self.refresh_s:
                self.workers = await self.chainio.read(self._fetch)
                self.refreshed_at = time.monotonic()
        return self.workers

    def _fetch(self) -> list[WorkerEntry]:
        protocol = self.chainio.protocol
        addresses, stakes = protocol.get_model_nodes(self.model_id)
        # the model's sortition slots (a departed node's slot is reused); weight 0 = not active now
        return [WorkerEntry(bytes.fromhex(a[2:]), protocol.get_node(a)["endpoint"], s) for a, s in zip(addresses, stakes) if s > 0]

    async def get_endpoint(self, address: bytes) -> str:
        """Return a node's registered endpoint (registered nodes only; active or not)."""
        for entry in self.workers:
            if entry.address == address:
                return entry.url
        node = await self.chainio.read(self.chainio.protocol.get_node, Web3.to_checksum_address(address))
        return node["endpoint"]


def verify_worker_receipt(receipt: Receipt, job: Job, output_tokens, worker: bytes, domain: SigningDomain) -> None:
    """Check a worker's answer: signed by ``worker`` for this deployment, about this job and output."""
    if receipt.worker != worker:
        raise InvalidSignature(f"receipt names worker 0x{receipt.worker.hex()}, the job went to 0x{worker.hex()}")
    verify_receipt_signature(receipt, domain)
    verify_receipt_binding(receipt, job, output_tokens)
    if not output_tokens:
        raise InvalidProof("the worker returned no output token")


def _relay(on_chunk: OnChunk | None, relayed: list[int], max_tokens: int) -> OnChunk | None:
    """``on_chunk``, recording in ``relayed`` the tokens it was handed (None stays None: nothing streams).
    A worker streaming past the job's ``max_new_tokens`` is refused at the first chunk too long
    (each token costs the gateway a decode: an endless stream would be work for nothing)."""
    if on_chunk is None:
        return None

    def relay(tokens: tuple[int, ...], signed: SignedPrefix) -> None:
        if len(relayed) + len(tokens) > max_tokens:
            raise BadResponse(f"the worker streamed more than the job's {max_tokens} tokens")
        relayed.extend(tokens)
        on_chunk(tokens, signed)

    return relay


def verify_stream_receipt(reply: WorkerReply, job: Job) -> None:
    """Check a streamed reply's receipt (already checked as the worker's, about this job and output)
    signs an output that starts with the last prefix the worker signed; `StreamEquivocation` with the
    evidence otherwise."""
    stream = reply.stream
    if stream is None or stream.last is None or not is_prefix_contradicted(stream.last.prefix, reply.output_tokens):
        return
    evidence = Equivocation(stream.last, tuple(job.input_tokens) + tuple(reply.output_tokens), receipt=reply.receipt)
    raise StreamEquivocation(f"the receipt's output does not start with the {stream.token_count} tokens the worker signed "
                             "as it streamed them: equivocation", evidence)


def verify_streamed_prefix(streamed: list[int], output_tokens) -> None:
    """Check the tokens a worker streamed are the start of the output its receipt signs."""
    if tuple(output_tokens[: len(streamed)]) != tuple(streamed):
        raise InvalidProof(f"the worker streamed {len(streamed)} tokens that are not the start of the output its receipt signs")


class NetworkDispatcher:
    """Routes client jobs to the Registry's workers and records what it dispatched."""

    def __init__(self, worker: Worker, store: Store, tables: DispatcherTables, view: RegistryView, key: NodeKey,
                 domain: SigningDomain, session: aiohttp.ClientSession, committee_size: int, max_transcript_tokens: int):
        self.worker, self.store, self.tables, self.view = worker, store, tables, view
        self.key, self.domain, self.session = key, domain, session
        self.duty_session = session
        """The session of this node's duties (committee jobs, openings it checks): its own connections,
        so no number of client jobs in flight can hold them (the service gives it a session of its own)."""
        self.client_jobs_per_worker = CLIENT_JOBS_PER_WORKER
        self._client_jobs: dict[bytes, int] = {}
        """Client jobs in flight at each other worker (at most client_jobs_per_worker)."""
        self.duties = None  # node/dispatcher/deadlines.py's DutyClock (set by the service): shed client work before a duty's window closes
        self.committee_size = committee_size
        self.max_transcript_tokens = max_transcript_tokens
        """The deployment's MAX_TRANSCRIPT_TOKENS: a longer job's receipt could never be audited."""
        self._next = 0
        self.health = WorkerHealth()
        self.stream_limits = StreamLimits()
        """First-token and idle limits of every relayed stream (set by the service from the config)."""
        self.on_equivocation: Callable[[bytes, Equivocation], None] | None = None
        """Called with (worker, evidence) when a worker's receipt contradicts its signed stream (the service slashes)."""
        self.readiness = None  # node/dispatcher/readiness.py's ReadinessMonitor (set by the service): why no_workers
        self.promises = None  # node/dispatcher/promises.py's Promises (set by the service): a batching promise per job
        self._routing: dict[bytes, asyncio.Future] = {}
        """Job hash → its run in progress. A client chooses its job's nonce, so the same job can arrive twice
        at once: the second joins the first (one worker, one receipt), never a second worker whose receipt
        would get a promise while the first's is the one kept and batched."""

    def verify_admission(self, job: Job) -> None:
        """Check the job fits the model and limits, and enough workers exist to audit it: the rule
        readiness reports (`compute_needed_workers`: a committee, the job's worker, and this
        dispatcher when it is one of the workers, since the contract excludes both from the draw)."""
        self.worker.verify_admission(job)
        # A receipt over the deployment's transcript bound cannot be audited (startAudit refuses
        # it): never promise to batch one (docs/protocol.md §12 "Undelivered jobs").
        verify_transcript_bound(len(job.input_tokens), job.max_new_tokens, self.max_transcript_tokens)
        weighs = any(entry.address == self.key.address for entry in self.view.workers)
        needed = compute_needed_workers(self.committee_size, weighs)
        if len(self.view.workers) < needed:
            raise NoWorkers(f"{len(self.view.workers)} active workers serve this model; an audited job needs {needed} "
                            f"(its worker, {'this dispatcher, ' if weighs else ''}and a committee of {self.committee_size})")

    async def dispatch(self, job: Job, audit_requested: bool, on_chunk: OnChunk | None = None) -> JobResult:
        """Run ``job`` on the next worker that answers with a valid receipt; keep the result.

        With ``on_chunk``, the worker's tokens are handed over as it samples them, each chunk once its
        signature holds. A worker that fails before its first chunk went out is that worker's failure like
        any other (the next one gets the job); one that fails after is `StreamBroken`: the tokens already
        out cannot be taken back."""
        try:
            self.verify_admission(job)
        except NoWorkers as exc:  # say why, this node's own standing first
            reasons = await self.readiness.get_reasons() if self.readiness is not None else []
            if reasons:
                raise NoWorkers(f"{exc}. Why: " + "; ".join(reasons)) from None
            raise
        job_hash = compute_job_hash(job)
        known = self.tables.get_dispatched_job(job_hash)
        if known is not None:
            return JobResult(job_hash, known.job, known.receipt, known.output_tokens, await self._promise(job_hash, known.receipt))
        running = self._routing.get(job_hash)
        if running is not None:
            try:
                return await asyncio.shield(running)  # a joiner that leaves cancels nothing
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this joiner itself was cancelled
                raise NoWorkerCompleted(f"job 0x{job_hash.hex()} was running for an identical request (same nonce) "
                                        "whose caller left; retry") from None
        running = self._routing[job_hash] = asyncio.get_running_loop().create_future()
        try:
            result = await self._route(job, job_hash, audit_requested, on_chunk)
        except asyncio.CancelledError:  # the first caller left: its run ends, as without joiners
            running.cancel()
            raise
        except BaseException as exc:
            running.set_exception(exc)
            running.exception()  # retrieved here: with no joiner nobody else reads it
            raise
        else:
            running.set_result(result)
            return result
        finally:
            del self._routing[job_hash]

    async def _route(self, job: Job, job_hash: bytes, audit_requested: bool, on_chunk: OnChunk | None) -> JobResult:
        if self.duties is not None:  # a duty about to miss its window comes first: no new client work
            self.duties.verify_room_for_clients()
        if self.promises is not None:  # never take a job whose receipt this node could not batch in time
            await self.promises.verify_capacity()
        failures = []
        for entry in self.health.compute_order(self._rotation()):
            relayed: list[int] = []
            if entry.address != self.key.address and self._client_jobs.get(entry.address, 0) >= self.client_jobs_per_worker:
                failures.append(f"0x{entry.address.hex()}: this gateway's client share of it is in use")
                continue
            try:
                output_tokens, receipt = await self._run_client_job(entry, job, _relay(on_chunk, relayed, job.max_new_tokens))
                verify_streamed_prefix(relayed, output_tokens)
            except WORKER_BUSY as exc:
                if relayed:
                    raise StreamBroken(f"worker 0x{entry.address.hex()} failed job 0x{job_hash.hex()} after streaming {len(relayed)} "
                                       f"tokens ({compute_failure_code(exc)}); the stream ends here: retry the request") from None
                self.health.on_busy(entry.address)
                log.info("worker 0x%s is full (%s); job 0x%s goes to the next worker", entry.address.hex(), compute_failure_code(exc), job_hash.hex())
                failures.append(f"0x{entry.address.hex()}: {compute_failure_code(exc)}")
                continue
            except WORKER_FAILURES as exc:
                self._on_worker_failure(entry.address, exc)
                log.warning("worker 0x%s (%s) failed job 0x%s%s: %s %r", entry.address.hex(), entry.url, job_hash.hex(),
                            f" after streaming {len(relayed)} tokens" if relayed else "", type(exc).__name__, str(exc)[:LOGGED_DETAIL_CHARS])
                if relayed:
                    raise StreamBroken(f"worker 0x{entry.address.hex()} failed job 0x{job_hash.hex()} after streaming {len(relayed)} "
                                       f"tokens ({compute_failure_code(exc)}); the stream ends here: retry the request") from None
                failures.append(f"0x{entry.address.hex()}: {compute_failure_code(exc)}")
                continue
            self.health.on_success(entry.address)
            self._keep(job_hash, job, entry, output_tokens, receipt, audit_requested)
            return JobResult(job_hash, job, receipt, output_tokens, await self._promise(job_hash, receipt))
        raise NoWorkerCompleted(f"no worker completed job 0x{job_hash.hex()}: " + "; ".join(failures))

    async def _run_client_job(self, entry: WorkerEntry, job: Job, on_chunk) -> tuple[tuple[int, ...], Receipt]:
        """`run_on` for a client's job, counted against this gateway's client share of ``entry``."""
        self._client_jobs[entry.address] = self._client_jobs.get(entry.address, 0) + 1
        try:
            return await self.run_on(entry.address, entry.url, job, on_chunk)
        finally:
            self._client_jobs[entry.address] -= 1
            if not self._client_jobs[entry.address]:
                del self._client_jobs[entry.address]

    def _on_worker_failure(self, address: bytes, exc: BaseException) -> None:
        if isinstance(exc, (StreamStalled, BadStream)):
            self.health.on_strike(address)
        else:
            self.health.on_failure(address)
        if isinstance(exc, StreamEquivocation) and self.on_equivocation is not None:
            self.on_equivocation(address, exc.evidence)

    async def _promise(self, job_hash: bytes, receipt: Receipt):
        return await self.promises.make(job_hash, receipt) if self.promises is not None else None

    def _rotation(self) -> list[WorkerEntry]:
        workers = list(self.view.workers)
        start = self._next % len(workers)
        self._next += 1
        return workers[start:] + workers[:start]

    def _keep(self, job_hash: bytes, job: Job, entry: WorkerEntry, output_tokens, receipt: Receipt, audit_requested: bool) -> None:
        url = "" if entry.address == self.key.address else entry.url
        self.store.insert_dispatched(job_hash, entry.address, url, audit_requested)
        self.tables.insert_dispatched_job(job_hash, job, entry.address, url, output_tokens, receipt, audit_requested)

    async def run_on(self, address: bytes, url: str, job: Job, on_chunk: OnChunk | None = None,
                     for_duty: bool = False) -> tuple[tuple[int, ...], Receipt]:
        """Run ``job`` on the node at ``address`` (this one: its own worker); check and return its answer.
        ``on_chunk``: called with each checked chunk of output tokens as that worker streams them. ``for_duty``:
        a committee job, sent on the duties' session (the worker sees the same signed job on the same route either way)."""
        reply = None
        if address == self.key.address:
            result = await run_local_job(self.worker, job, on_chunk)
            output_tokens, receipt = tuple(result.output_tokens), result.receipt
        else:
            peer = PeerClient(url, self.key, self.duty_session if for_duty else self.session, recipient=address)
            reply = await (peer.submit_job(job) if on_chunk is None else peer.stream_job(job, on_chunk, self.domain, self.stream_limits))
            output_tokens, receipt = tuple(reply.output_tokens), reply.receipt
        verify_worker_receipt(receipt, job, output_tokens, address, self.domain)
        if reply is not None:
            verify_stream_receipt(reply, job)
        if self.promises is not None:  # a receipt that expires before its batch's audit could start is the worker's failure
            await self.promises.verify_horizon(receipt, for_duty)
        return output_tokens, receipt

    async def fetch_opening(self, address: bytes, url: str, job_hash: bytes, challenge):
        """Ask the node that ran ``job_hash`` for this job (sent by this node) to open a challenge: this node's
        own worker in process, on the duty lane (no sender's quota), a peer on the duties' session."""
        if address == self.key.address:
            return await self.worker.open_own_cells(job_hash, challenge=challenge)
        return await PeerClient(url, self.key, self.duty_session, recipient=address).request_opening(job_hash, challenge=challenge)

