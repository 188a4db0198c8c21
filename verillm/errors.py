"""One error root for the whole project.

Every error a user can cause or meet derives from `VerillmError`. Edges translate them once:
the HTTP middleware into 4xx/5xx JSON bodies, the CLI into exit codes, the chain layer from
revert reasons. The `code` is a stable machine-readable name; the message says what was wrong.
"""


class VerillmError(Exception):
    """Root of every error VeriLLM raises on purpose."""

    code = "verillm_error"
    http_status = 500
    retry_after_s: int | None = None
    """Seconds a client should wait before retrying (sent as `Retry-After`; OpenAI clients honour it)."""


class InvalidInput(VerillmError):
    """A request, record or argument is malformed or out of range."""

    code = "invalid_input"
    http_status = 400


class EncodingError(InvalidInput):
    """Bytes that do not decode to the record they claim to be."""

    code = "invalid_encoding"


class UnknownModel(InvalidInput):
    """A model id (manifest hash) or model name that this node does not serve."""

    code = "unknown_model"
    http_status = 404


class PromptTooLong(InvalidInput):
    """Input plus requested output does not fit the model's context."""

    code = "prompt_too_long"
    http_status = 413


class InvalidSignature(VerillmError):
    """A signature that does not recover to the claimed signer."""

    code = "invalid_signature"
    http_status = 401


class InvalidProof(VerillmError):
    """A Merkle proof, VRF proof or opening that does not verify."""

    code = "invalid_proof"
    http_status = 422


class ReplayedMessage(VerillmError):
    """A job, receipt or message that was already accepted once."""

    code = "replayed"
    http_status = 409


class QueueFull(VerillmError):
    """The engine queue is at capacity; retry later."""

    code = "queue_full"
    http_status = 503
    retry_after_s = 2


class NotFound(VerillmError):
    """A job, receipt or opening this node does not hold."""

    code = "not_found"
    http_status = 404


class NotBatched(NotFound):
    """A promised receipt is in no posted batch of this dispatcher yet."""

    code = "not_batched"


class ChainError(VerillmError):
    """A transaction reverted or the chain could not be reached."""

    code = "chain_error"
    http_status = 502


class StillPending(ChainError):
    """A job's on-chain status did not reach what the caller waits for (a verdict, final) within its timeout."""

    code = "still_pending"
    http_status = 504


class ConfigError(VerillmError):
    """A configuration file, variable or flag with a bad value."""

    code = "config_error"
    http_status = 500


class InvalidApiKey(VerillmError):
    """An OpenAI-route request without one of the node's API keys (when it has any)."""

    code = "invalid_api_key"
    http_status = 401


class TooManyRequests(VerillmError):
    """One client has as many requests in flight as the node allows it; retry when one ends."""

    code = "rate_limited"
    http_status = 429
    retry_after_s = 1


class RequestTimeout(InvalidInput):
    """The request body did not arrive within the node's read timeout (a slow or stalled client)."""

    code = "request_timeout"
    http_status = 408


class StorageError(VerillmError):
    """The node's store cannot take a write (disk full, I/O error): nothing was acknowledged; retry later."""

    code = "storage_error"
    http_status = 503


class EngineError(VerillmError):
    """The engine failed to run a job: the node's fault, not the request's."""

    code = "engine_error"
    http_status = 500


class ModelFileMissing(ConfigError):
    """A model directory or GGUF lacks a file the manifest needs (nothing is downloaded)."""

    code = "model_file_missing"


class UnsupportedModel(ConfigError):
    """A checkpoint whose architecture the engines do not serve (not a known decoder-only family)."""

    code = "unsupported_model"


class ProfileMissing(ConfigError):
    """A tolerance-mode model has no calibrated profile; the message says which command writes one."""

    code = "profile_missing"


class BadResponse(VerillmError):
    """A node's answer that breaks the protocol: malformed, oversized, or not what was asked.

    Raised by the SDK about the node it talks to, and by a gateway about a worker (whose
    failure it is: the gateway retries the next worker and never relays the worker's text)."""

    code = "bad_response"
    http_status = 502


class DeadlineExceeded(BadResponse):
    """A node did not finish its answer within the caller's total deadline (a stall or a trickle)."""

    code = "deadline_exceeded"
    http_status = 504


class Forbidden(VerillmError):
    """A correctly signed sender this node does not serve on that route (not staked, not named)."""

    code = "forbidden"
    http_status = 403
