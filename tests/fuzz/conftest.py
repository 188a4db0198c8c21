"""Fuzzing: every decoder and endpoint of the node against hypothesis-generated input.

Each target is one property: any input is either accepted or refused with a typed
`VerillmError` (over HTTP: a 4xx with an error body), never another exception, a 500, a
hang or a crash. The default suite runs `DEFAULT_EXAMPLES` per target; `make test-fuzz`
runs the same targets with `VERILLM_FUZZ_EXAMPLES` (100,000) under the `fuzz` marker.
"""

import os

import pytest
from fuzzing import DEFAULT_EXAMPLES, FUZZ_EXAMPLES, take_tally


@pytest.fixture(autouse=True)
def case_count(request):
    """Count the cases each target ran; append "<test id> <cases>" to $VERILLM_FUZZ_COUNTS if set."""
    take_tally()
    yield
    cases = take_tally()
    assert cases > 0, "the target ran no case"
    if os.environ.get("VERILLM_FUZZ_COUNTS"):
        with open(os.environ["VERILLM_FUZZ_COUNTS"], "a") as out:
            out.write(f"{request.node.nodeid} {cases}\n")


def pytest_generate_tests(metafunc):
    """Every test taking ``examples`` runs twice: a short default case and the long `fuzz` one."""
    if "examples" in metafunc.fixturenames:
        metafunc.parametrize("examples", [
            pytest.param(DEFAULT_EXAMPLES, id="default"),
            pytest.param(FUZZ_EXAMPLES, id="fuzz", marks=[pytest.mark.fuzz, pytest.mark.slow]),
        ])
