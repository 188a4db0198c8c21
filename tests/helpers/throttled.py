"""An engine that samples at a model's pace: the tiny TorchEngine, one token per ``delay_s``.

The tiny model samples a token in well under a millisecond, so "chunks arrive while the engine
samples" needs an interval to observe; 40 ms per token is SmolLM2's speed on this CPU. The
engine records when it sampled each token (the engine thread's clock, `time.monotonic`)."""

import threading
import time


class ThrottledEngine:
    """``inner`` sampling one token per ``delay_s``; ``sampled_at`` lists when each token was sampled."""

    def __init__(self, inner, delay_s: float = 0.04):
        self.inner, self.manifest, self.model_id, self.max_batch_size = inner, inner.manifest, inner.model_id, inner.max_batch_size
        self.delay_s = delay_s
        self.sampled_at: list[float] = []
        self.lock = threading.Lock()

    def run(self, jobs, on_token=None):
        def slow(index: int, token: int) -> None:
            time.sleep(self.delay_s)
            with self.lock:
                self.sampled_at.append(time.monotonic())
            if on_token is not None:
                on_token(index, token)

        return self.inner.run(jobs, on_token=slow)
