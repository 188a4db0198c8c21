"""The devnet's load helpers (issue 11): deadlines sized in seconds, the soak's process sampling,
the node count a committee needs. The networks themselves run in `verillm devnet --soak` and
`verillm bench devnet-load` (numbers in docs/operators.md) and in tests/e2e."""

import os
import subprocess
import sys
import time

import click
import pytest

from verillm.devnet.run import _node_specs
from verillm.devnet.soak import ProcessSeries, Sample, Sampler, quarter_means, read_process, summarize_series
from verillm.devnet.windows import compute_timed_preset
from verillm.spec.params import MINIMAL, compute_timeline_problems


def test_timed_preset_sizes_deadlines_in_seconds_and_keeps_the_contracts_rules():
    preset = compute_timed_preset(MINIMAL, block_time_s=0.5, window_s=30)
    assert (preset.COMMIT_WINDOW_BLOCKS, preset.OPEN_WINDOW_BLOCKS, preset.PROOF_WINDOW_BLOCKS) == (60, 60, 60)
    assert (preset.DRAW_WINDOW_BLOCKS, preset.START_WINDOW_BLOCKS) == (120, 120)
    assert compute_timeline_problems(preset) == []  # Params.validate accepts it: epoch and unbonding cover the timeline
    # waiting periods and everything else stay MINIMAL's: the happy path is not slower
    assert (preset.name, preset.AUDIT_DRAW_DELAY_BLOCKS, preset.DISPUTE_WINDOW_BLOCKS, preset.COMMITTEE_SIZE) == \
        ("minimal", MINIMAL.AUDIT_DRAW_DELAY_BLOCKS, MINIMAL.DISPUTE_WINDOW_BLOCKS, MINIMAL.COMMITTEE_SIZE)


def test_timed_preset_stays_inside_the_blockhash_range_and_never_shrinks_a_window():
    long = compute_timed_preset(MINIMAL, block_time_s=1.0, window_s=600)
    assert long.OPEN_WINDOW_BLOCKS == 255  # blockhash reaches 256 blocks back
    # a private draw's late reveal reads its seed block's hash too: draw + grace within the range
    assert (long.DRAW_WINDOW_BLOCKS, long.PRIVATE_REVEAL_GRACE_BLOCKS) == (170, 85) and compute_timeline_problems(long) == []
    short = compute_timed_preset(MINIMAL, block_time_s=1.0, window_s=1)
    assert short.COMMIT_WINDOW_BLOCKS == MINIMAL.COMMIT_WINDOW_BLOCKS and short.START_WINDOW_BLOCKS == MINIMAL.START_WINDOW_BLOCKS
    with pytest.raises(ValueError):
        compute_timed_preset(MINIMAL, block_time_s=0, window_s=60)


def test_devnet_needs_a_committee_besides_the_worker_and_the_dispatcher():
    assert len(_node_specs(None, None)) == 5 and len(_node_specs(None, "int8")) == 6
    with pytest.raises(click.UsageError, match="at least 6"):
        _node_specs(5, "int8")
    # Two dishonest nodes (the explorer's devnet: a cheating worker and a lazy member) can tie an
    # honest job's committee: enough nodes for its appeal (worker, dispatcher, round 0's 3 and the
    # appeal's 5, issue 34); the dishonest ones last, in the order given. At least one more node
    # each than 5, so that 5 remain once both are slashed.
    specs = _node_specs(None, ("int8", "lazy"))
    assert len(specs) == 10 and [s.label for s in specs[-2:]] == ["cheater (int8)", "lazy member"] and all(s.is_honest for s in specs[:8])
    assert len(_node_specs(7, ("int8", "lazy"))) == 7
    with pytest.raises(click.UsageError, match="at least 7"):
        _node_specs(6, ("int8", "lazy"))


def test_read_process_sees_a_growing_process_and_none_once_it_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(64 << 20); sys.stdout.write('x'); sys.stdout.flush(); time.sleep(30)"],
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout.read(1) == b"x"
        rss_kib, fds = read_process(child.pid)
        assert rss_kib > 64 * 1024 and fds >= 3
    finally:
        child.kill()
        child.wait()
    assert read_process(child.pid) is None
    assert read_process(os.getpid()) is not None


def test_growth_is_the_last_quarter_against_the_first():
    assert quarter_means([1, 2, 3, 4, 5, 6, 7, 8]) == (1.5, 7.5)
    assert quarter_means([4]) == (4, 4)
    series = ProcessSeries("node 0", 1, [Sample(t, 1024 * (100 + t), 10 + t // 4) for t in range(8)])
    summary = summarize_series(series)
    assert (summary["rss_first_quarter_mib"], summary["rss_last_quarter_mib"], summary["rss_growth_pct"]) == (100.5, 106.5, 5.97)
    assert (summary["fds_first_quarter"], summary["fds_last_quarter"], summary["fds_peak"]) == (10.0, 11.0, 11)


def test_sampler_samples_in_the_background():
    with Sampler([("me", os.getpid())], interval_s=0.05) as sampler:
        time.sleep(0.3)
    assert len(sampler.series[0].samples) >= 3
