"""Revert data decoding, independent of any chain."""

from eth_abi import encode
from eth_utils import function_signature_to_4byte_selector

from verillm.chain.errors import ErrorDecoder, get_revert_data

ABI = [
    {"type": "error", "name": "StakeTooLow", "inputs": [{"name": "required", "type": "uint256"}, {"name": "sent", "type": "uint256"}]},
    {"type": "error", "name": "BadRoot", "inputs": [{"name": "", "type": "bytes32"}]},
    {"type": "error", "name": "Pair", "inputs": [{"name": "p", "type": "tuple", "components": [{"name": "a", "type": "uint8"}, {"name": "b", "type": "address"}]}]},
]


def _selector(signature: str) -> bytes:
    return function_signature_to_4byte_selector(signature)


def test_custom_error_with_named_args():
    data = _selector("StakeTooLow(uint256,uint256)") + encode(["uint256", "uint256"], [10**18, 5])
    assert ErrorDecoder([ABI]).compute_reason(data) == ("StakeTooLow", {"required": 10**18, "sent": 5}, f"StakeTooLow(required={10**18}, sent=5)")


def test_unnamed_bytes_and_tuple_args():
    decoder = ErrorDecoder([ABI])
    name, args, _ = decoder.compute_reason(_selector("BadRoot(bytes32)") + b"\x11" * 32)
    assert (name, args) == ("BadRoot", {"arg0": "0x" + "11" * 32})
    data = _selector("Pair((uint8,address))") + encode(["(uint8,address)"], [(3, "0x" + "22" * 20)])
    assert decoder.compute_reason(data)[1] == {"p": [3, "0x" + "22" * 20]}


def test_unknown_selector_and_empty_data_say_so():
    decoder = ErrorDecoder([ABI])
    assert decoder.compute_reason(b"\xde\xad\xbe\xef")[2] == "unknown error 0xdeadbeef"
    assert "no revert data" in decoder.compute_reason(b"")[2]
    truncated = _selector("StakeTooLow(uint256,uint256)") + b"\x00" * 7
    assert "undecodable" in decoder.compute_reason(truncated)[2]


def test_revert_data_from_eth_tester_messages():
    class TransactionFailed(Exception):  # the shape of eth_tester.exceptions.TransactionFailed
        pass

    assert get_revert_data(TransactionFailed("execution reverted: b'\\x01\\x02'")) == b"\x01\x02"
    string_error = get_revert_data(TransactionFailed("execution reverted: no stake"))
    assert ErrorDecoder([]).compute_reason(string_error)[1] == {"message": "no stake"}
    assert get_revert_data(ValueError("something else")) is None
