"""JSON from untrusted bytes, with its nesting depth bounded before the parser sees it.

Importing py_ecc (through py-evm and the chain code) raises Python's recursion limit to
100,000, so the C JSON decoder no longer raises `RecursionError` on deep input: 100,000
nested ``[`` overflow the C stack and kill the process (SIGSEGV). Every JSON decode of
bytes someone else chose goes through `load_json`, which measures the depth first (outside
strings, in C-speed regex passes) and refuses anything deeper than `MAX_JSON_DEPTH`.

The depth is measured on the text as a JSON parser tokenizes it: string literals are removed
first (so brackets inside strings do not count), then runs of openers and closers are summed.
For valid JSON this is exactly the nesting depth; for invalid JSON it is never less than the
depth the parser reaches before it stops at the first error. The result has no lone UTF-16
surrogate anywhere (``"\\ud800"`` decodes to one): such text cannot be encoded as UTF-8 and
would fail later, deep inside a tokenizer, as a 500.
"""

import json
import re

from verillm.errors import InvalidInput

MAX_JSON_DEPTH = 64
"""Deepest nesting accepted: every VeriLLM body is at most 5 levels deep; 64 leaves room."""

_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_RUN = re.compile(r"[\[{]+|[\]}]+")


def compute_json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """Return the deepest nesting of arrays and objects in ``text`` (strings left out).

    When ``text`` holds at most ``limit`` brackets in all, their count is returned instead: an
    upper bound within the limit, found in C (most bodies stop here).
    """
    if text.count("[") + text.count("{") <= limit:
        return text.count("[") + text.count("{")
    depth = deepest = 0
    for run in _RUN.finditer(_STRING.sub("", text)):
        token = run.group()
        if token[0] in "[{":
            depth += len(token)
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - len(token))
    return deepest


def load_json(raw: bytes | str, what: str = "body", max_depth: int = MAX_JSON_DEPTH) -> object:
    """Return the JSON value in ``raw`` (UTF-8); raise InvalidInput naming ``what`` if it is not one we accept."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    depth = compute_json_depth(text, max_depth)
    if depth > max_depth:
        raise InvalidInput(f"{what}: JSON nested {depth} levels deep (limit {max_depth})")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an integer of over 4300 digits
        raise InvalidInput(f"{what}: not valid JSON ({exc})") from None
    _process_surrogates(value, text, what)
    return value


def _process_surrogates(value: object, text: str, what: str) -> None:
    if "\\u" not in text:
        return  # a lone surrogate can only come from an escape: UTF-8 input has none
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what}: contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text") from None
