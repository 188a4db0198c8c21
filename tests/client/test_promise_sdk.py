"""The SDK's side of batching promises: a response's promise is parsed with the completion,
bound to its receipt, and `verify_promise` checks signer, deployment and deadline offline. The
node here runs without a chain (no promise of its own); the promise is signed as a networked
dispatcher signs it (node/dispatcher/promises.py; on anvil: tests/node/dispatcher/test_batch_promises.py)."""

import dataclasses
import json
import urllib.request

import pytest
from eth_keys import keys
from eth_utils import to_checksum_address

from verillm.client import parse_completion, verify_promise
from verillm.errors import InvalidProof, InvalidSignature
from verillm.wire import promise_to_json
from verillm.spec import promise as spec
from verillm.spec.params import MINIMAL, compute_timeline
from verillm.spec.receipt import SigningDomain, compute_receipt_hash

KEY = b"\x05" * 32
DISPATCHER = keys.PrivateKey(KEY).public_key.to_canonical_address()
DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x0c" * 20)


def _response(node) -> dict:
    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 3, "temperature": 0}).encode()
    request = urllib.request.Request(node.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request).read())


def test_a_response_carries_a_promise_the_sdk_checks(threaded_node):
    response = _response(threaded_node)
    assert parse_completion(response, chat=False).promise is None  # a node without a chain promises nothing
    receipt_hash = compute_receipt_hash(parse_completion(response, chat=False).receipt)
    signed = spec.sign_promise(spec.BatchPromise(receipt_hash, DISPATCHER, 130), KEY, DOMAIN)
    response["verillm"]["batch_promise"] = promise_to_json(signed)
    completion = parse_completion(response, chat=False)
    assert completion.promise == signed
    assert verify_promise(completion, DOMAIN, dispatcher=DISPATCHER, head_block=100, batch_by_blocks=30) == to_checksum_address(DISPATCHER)
    with pytest.raises(InvalidSignature):  # another deployment's Coverage contract
        verify_promise(completion, dataclasses.replace(DOMAIN, verifying_contract=b"\x0d" * 20))
    with pytest.raises(InvalidProof, match="expected"):
        verify_promise(completion, DOMAIN, dispatcher=b"\x01" * 20)
    with pytest.raises(InvalidProof, match="later than"):  # due further out than the deployment allows
        verify_promise(completion, DOMAIN, head_block=90, batch_by_blocks=30)
    # The receipt's horizon (docs/protocol.md §12 "Receipt horizons"): this node has no chain and
    # signs 0, so against the deployment's windows its receipt is refused; one that outlives the
    # promised batch's last start (130 + the start span) passes, one block less is refused.
    with pytest.raises(InvalidProof, match="auditable only until block 0"):
        verify_promise(completion, DOMAIN, head_block=100, preset=MINIMAL)
    start_span = compute_timeline(MINIMAL).start_span
    for until, ok in ((130 + start_span, True), (130 + start_span - 1, False)):
        receipt = dataclasses.replace(completion.receipt, auditable_until_block=until)
        promised = spec.sign_promise(spec.BatchPromise(compute_receipt_hash(receipt), DISPATCHER, 130), KEY, DOMAIN)
        horizon = dataclasses.replace(completion, receipt=receipt, promise=promised)
        if ok:
            verify_promise(horizon, DOMAIN, head_block=100, preset=MINIMAL)
        else:
            with pytest.raises(InvalidProof, match="auditable only until"):
                verify_promise(horizon, DOMAIN, head_block=100, preset=MINIMAL)
    response["verillm"]["batch_promise"]["receipt_hash"] = "0x" + "11" * 32
    with pytest.raises(InvalidProof, match="another receipt"):
        parse_completion(response, chat=False)
