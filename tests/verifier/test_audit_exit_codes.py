"""`verillm audit` exit codes: 1 means "the replay rejects / an inconsistency was found", so a
crash of the tool itself must not exit 1 (issue 23: `audit chain` crashed with KeyError: 0 and
exited 1, which the docs define as an inconsistency). It exits 2 with the traceback printed."""

import pytest

from verillm.cli.audit import tool_failure
from verillm.errors import NotFound


def test_a_crash_inside_the_auditor_exits_2_with_its_traceback(capsys):
    with pytest.raises(SystemExit) as exited:
        with tool_failure():
            {}[0]  # what the adjudication's calldata did to the old auditor
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "KeyError: 0" in err and "a bug in the tool, not a finding about the chain" in err


def test_a_verillm_error_keeps_its_own_path():
    with pytest.raises(NotFound):  # the CLI's main turns it into its message and exit 2
        with tool_failure():
            raise NotFound("no evidence for that job")
