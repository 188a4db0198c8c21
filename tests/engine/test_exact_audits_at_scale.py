"""Fresh honest exact-mode audits at scale (`verillm bench audits`): 0 false rejections and not
one committed position differing in one bit. The default run audits a small sample; `make
test-slow` runs the issue-21 bar, 10,000 tiny and 500 SmolLM2 audits (hours on a shared
2-core CPU)."""

import pytest

from verillm.bench.audits import run_honest_audits
from verillm.engine.models import load_model


def assert_all_honest(report: dict, count: int) -> None:
    assert report["audits"] == count
    assert report["false_rejections"] == 0, report["rejected"][:3]
    assert report["differing_positions"] == 0 and report["positions"] > count


def test_a_sample_of_fresh_honest_audits_is_exact():
    model, tokenizer, manifest = load_model("tiny", "bfloat16")
    report = run_honest_audits(model, tokenizer, manifest, "tiny", 12, max_new_tokens=8, seed="default-suite", chunk=12)
    assert_all_honest(report, 12)
    assert len(report["batch_shapes"]) > 2 and any(shape.endswith("x2t") for shape in report["batch_shapes"])


@pytest.mark.slow
@pytest.mark.parametrize(("model_name", "count"), [("tiny", 10_000), pytest.param("smollm2", 500, marks=pytest.mark.smollm2)])
def test_the_issue_21_bar_of_honest_audits(model_name, count):
    model, tokenizer, manifest = load_model(model_name, "bfloat16")
    report = run_honest_audits(model, tokenizer, manifest, model_name, count, seed=f"test-slow-{model_name}")
    assert_all_honest(report, count)
    assert report["long_prompts"] > 0 and report["ended_at_max"] > 0
