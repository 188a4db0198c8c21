"""Helpers for tests that send transactions (titanoboa's `boa.reverts`, in pytest)."""

import pytest

from verillm.chain import TransactionReverted


def reverts(error: str):
    """Expect the transaction in the block to revert with ``error`` (a custom error's name or a reason)."""
    return pytest.raises(TransactionReverted, match=error)
