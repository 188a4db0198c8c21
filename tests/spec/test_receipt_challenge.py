import dataclasses

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data

from verillm.errors import InvalidProof, InvalidSignature
from verillm.spec.challenge import compute_challenge, compute_challenge_positions, compute_opened_cells
from verillm.spec.params import MAINNET, MINIMAL, compute_timeline
from verillm.spec.receipt import (EMPTY_SIGNATURE, SigningDomain, compute_auditable_until_block, compute_least_auditable_until_block,
                                  compute_receipt_duties_end_block, compute_signing_digest, sign_receipt, verify_receipt_horizon,
                                  verify_receipt_signature)
from verillm.spec.types import Receipt, SamplingParams

KEY = bytes.fromhex("4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318")
WORKER = bytes.fromhex(Account.from_key(KEY).address[2:])
DOMAIN = SigningDomain(chain_id=31337, verifying_contract=bytes.fromhex("5fbdb2315678afecb367f032d93f642f64180aa3"))


def receipt(**changes):
    base = Receipt(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, b"\x04" * 32, SamplingParams(700, 40, 900_000, 9), 64, b"\x05" * 32, 99, WORKER, EMPTY_SIGNATURE,
                   input_tokens=40, output_tokens=60, auditable_until_block=123_456)
    return dataclasses.replace(base, **changes)


def test_digest_matches_eth_account_eip712():
    r = receipt()
    typed = {
        "types": {
            "EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"}, {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"}],
            "Receipt": [
                {"name": n, "type": t}
                for n, t in [("jobHash", "bytes32"), ("modelId", "bytes32"), ("inputHash", "bytes32"), ("outputHash", "bytes32"), ("temperatureMilli", "uint32"), ("topK", "uint32"), ("topPPpm", "uint32"), ("seed", "uint64"), ("maxNewTokens", "uint32"), ("commitmentRoot", "bytes32"), ("numPositions", "uint32"), ("inputTokens", "uint32"), ("outputTokens", "uint32"), ("auditableUntilBlock", "uint64"), ("worker", "address")]
            ],
        },
        "primaryType": "Receipt",
        "domain": {"name": "VeriLLM", "version": "1", "chainId": 31337, "verifyingContract": "0x" + DOMAIN.verifying_contract.hex()},
        "message": {"jobHash": r.job_hash, "modelId": r.model_id, "inputHash": r.input_hash, "outputHash": r.output_hash, "temperatureMilli": 700, "topK": 40, "topPPpm": 900_000, "seed": 9, "maxNewTokens": 64, "commitmentRoot": r.commitment_root, "numPositions": 99, "inputTokens": 40, "outputTokens": 60, "auditableUntilBlock": 123_456, "worker": Account.from_key(KEY).address},
    }
    signed = Account.sign_message(encode_typed_data(full_message=typed), KEY)
    ours = sign_receipt(r, KEY, DOMAIN)
    assert ours.signature == signed.signature
    assert compute_signing_digest(r, DOMAIN) == bytes(signed.message_hash)


def test_signature_checks():
    signed = sign_receipt(receipt(), KEY, DOMAIN)
    verify_receipt_signature(signed, DOMAIN)
    with pytest.raises(InvalidSignature, match="not its worker"):
        verify_receipt_signature(dataclasses.replace(signed, num_positions=100), DOMAIN)
    with pytest.raises(InvalidSignature, match="not its worker"):  # a horizon stretched after signing
        verify_receipt_signature(dataclasses.replace(signed, auditable_until_block=123_457), DOMAIN)
    with pytest.raises(InvalidSignature):
        verify_receipt_signature(signed, SigningDomain(chain_id=1, verifying_contract=DOMAIN.verifying_contract))
    with pytest.raises(InvalidSignature, match="v byte"):
        verify_receipt_signature(dataclasses.replace(signed, signature=signed.signature[:64] + b"\x05"), DOMAIN)
    with pytest.raises(InvalidSignature, match="not the receipt's worker"):
        sign_receipt(receipt(worker=b"\x09" * 20), KEY, DOMAIN)


def test_challenge_positions_are_distinct_in_range_and_seeded():
    positions = compute_challenge_positions(b"\x07" * 32, prompt_len=40, output_len=500, count=32)
    assert len(set(positions)) == 32 and all(39 <= p < 539 for p in positions)
    assert positions == compute_challenge_positions(b"\x07" * 32, 40, 500, 32)
    assert positions != compute_challenge_positions(b"\x08" * 32, 40, 500, 32)


def test_short_outputs_are_challenged_everywhere_and_cells_respect_each_party():
    c = compute_challenge(b"\x01" * 32, prompt_len=10, output_len=5, committed_layers=(1, 2, 4), count=8)
    assert c.positions == (9, 10, 11, 12, 13)
    worker_cells = compute_opened_cells(c, num_positions=14)
    member_cells = compute_opened_cells(c, num_positions=15)
    assert (14, 4) not in worker_cells and (14, 4) in member_cells
    assert len(worker_cells) == 15


@pytest.mark.parametrize("preset", [MINIMAL, MAINNET], ids=lambda p: p.name)
def test_a_receipt_must_outlive_its_promised_batch_last_audit_start(preset):
    """An honest worker's horizon (head + RECEIPT_HORIZON_BLOCKS) outlives a promise made up to
    RECEIPT_HORIZON_BLOCKS − BATCH_BY_BLOCKS − start span blocks later; one block short is refused."""
    start_span = compute_timeline(preset).start_span
    honest = receipt(auditable_until_block=compute_auditable_until_block(1_000, preset))
    lag = preset.RECEIPT_HORIZON_BLOCKS - preset.BATCH_BY_BLOCKS - start_span
    assert lag > 0
    verify_receipt_horizon(honest, 1_000 + lag + preset.BATCH_BY_BLOCKS, preset)
    with pytest.raises(InvalidProof, match="auditable only until"):
        verify_receipt_horizon(honest, 1_000 + lag + 1 + preset.BATCH_BY_BLOCKS, preset)
    assert compute_least_auditable_until_block(1_000 + preset.BATCH_BY_BLOCKS, preset) == 1_000 + preset.BATCH_BY_BLOCKS + start_span
    assert compute_receipt_duties_end_block(honest, preset) == 1_000 + compute_timeline(preset).receipt_duty_span
