"""Chain errors, and turning revert data into them.

Every failure that comes out of `verillm.chain` is a `ChainError` (the project's one root,
`verillm.errors`). Revert data is decoded once, here, against the ABIs of every artifact the
chain layer knows: `Error(string)`, `Panic(uint256)` and each contract's custom errors, so a
message reads "Registry.register reverted: StakeTooLow(required=..., sent=...)".
"""

import ast

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_abi.exceptions import DecodingError
from eth_utils import function_signature_to_4byte_selector, to_checksum_address
from eth_utils.abi import collapse_if_tuple

from verillm.errors import ChainError

ERROR_STRING_SELECTOR = bytes.fromhex("08c379a0")  # Error(string)
PANIC_SELECTOR = bytes.fromhex("4e487b71")  # Panic(uint256)

# Solidity's panic codes (docs: "Panic via assert and other failure modes").
PANIC_REASONS = {
    0x00: "generic compiler panic",
    0x01: "assert failed",
    0x11: "arithmetic overflow or underflow",
    0x12: "division or modulo by zero",
    0x21: "conversion to an invalid enum value",
    0x22: "corrupt storage byte array",
    0x31: "pop on an empty array",
    0x32: "array index out of bounds",
    0x41: "out of memory",
    0x51: "call to an uninitialised internal function",
}


class TransactionReverted(ChainError):
    """A call or transaction that the EVM reverted; `error` is the decoded reason's name."""

    code = "chain_reverted"

    def __init__(self, message: str, *, error: str | None = None, args: dict | None = None, data: bytes = b""):
        super().__init__(message)
        self.error = error
        self.error_args = args or {}
        self.data = data


class ChainTimeout(ChainError):
    """A transaction receipt (or another chain condition) did not arrive in time."""

    code = "chain_timeout"


class ChainUnavailable(ChainError):
    """The JSON-RPC endpoint could not be reached or answered with a transport error."""

    code = "chain_unavailable"
    http_status = 503


class ErrorDecoder:
    """Maps 4-byte error selectors to their ABI entries, across every known contract."""

    def __init__(self, abis: list[list[dict]]):
        self._errors: dict[bytes, dict] = {}
        for abi in abis:
            for entry in abi:
                if entry.get("type") == "error":
                    self._errors[compute_error_selector(entry)] = entry

    def compute_reason(self, data: bytes) -> tuple[str | None, dict, str]:
        """Return (error name, named args, readable text) for revert ``data``."""
        if not data:
            return None, {}, "no revert data (a bare revert, out of gas, or an invalid opcode)"
        selector, body = data[:4], data[4:]
        if selector == ERROR_STRING_SELECTOR:
            message = _decode_or_none(["string"], body)
            return ("Error", {"message": message[0]}, repr(message[0])) if message else (None, {}, f"0x{data.hex()}")
        if selector == PANIC_SELECTOR:
            return _panic_reason(body)
        entry = self._errors.get(selector)
        if entry is None:
            return None, {}, f"unknown error 0x{data.hex()}"
        return _custom_reason(entry, body, data)


def compute_error_selector(entry: dict) -> bytes:
    """Return the 4-byte selector of an ABI error entry."""
    types = ",".join(collapse_if_tuple(i) for i in entry.get("inputs", []))
    return function_signature_to_4byte_selector(f"{entry['name']}({types})")


def _decode_or_none(types: list[str], body: bytes):
    try:
        return abi_decode(types, body)
    except (DecodingError, ValueError, OverflowError):
        return None


def _panic_reason(body: bytes) -> tuple[str, dict, str]:
    decoded = _decode_or_none(["uint256"], body)
    code = decoded[0] if decoded else -1
    return "Panic", {"code": code}, f"Panic(0x{code:02x}: {PANIC_REASONS.get(code, 'unknown panic code')})"


def _custom_reason(entry: dict, body: bytes, data: bytes) -> tuple[str, dict, str]:
    inputs = entry.get("inputs", [])
    values = _decode_or_none([collapse_if_tuple(i) for i in inputs], body)
    if values is None:
        return entry["name"], {}, f"{entry['name']}(<undecodable 0x{data.hex()}>)"
    args = {(i.get("name") or f"arg{n}"): _readable(v, i["type"]) for n, (i, v) in enumerate(zip(inputs, values))}
    text = ", ".join(f"{k}={v}" for k, v in args.items())
    return entry["name"], args, f"{entry['name']}({text})"


def _readable(value, abi_type: str = ""):
    if abi_type == "address":
        return to_checksum_address(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, (list, tuple)):
        return [_readable(v) for v in value]
    return value


def get_revert_data(exc: BaseException) -> bytes | None:
    """Return the revert data carried by an exception from web3 or eth-tester, None if it has none.

    web3 puts it in ``exc.data`` (hex); eth-tester's ``TransactionFailed`` carries only a message,
    either the decoded Error(string) text or the ``repr`` of the raw revert bytes.
    """
    data = getattr(exc, "data", None)
    if isinstance(data, str) and data.startswith("0x"):
        return bytes.fromhex(data[2:])
    if type(exc).__name__ != "TransactionFailed" or not exc.args:
        return None
    return _revert_data_from_tester_message(str(exc.args[0]))


def _revert_data_from_tester_message(message: str) -> bytes | None:
    prefix = "execution reverted: "
    if not message.startswith(prefix):
        return b"" if message in ("execution reverted", "Revert(b'')") else None
    text = message[len(prefix):]
    if text.startswith(("b'", 'b"')):
        return ast.literal_eval(text)
    return ERROR_STRING_SELECTOR + abi_encode(["string"], [text])
