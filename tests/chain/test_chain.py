"""The chain layer on both backends: deploy, call, transact, nonces, reverts, receipts, snapshots."""

import threading

import pytest
from eth_account import Account

from verillm.chain import ChainTimeout, ChainUnavailable, RpcChain, TransactionReverted
from verillm.errors import ChainError


def test_deploy_call_and_transact(chain, probe):
    alice = chain.dev_accounts[0]
    receipt = probe.transact("store", 7, 42, sender=alice)
    assert receipt["status"] == 1
    assert probe.call("values", 7) == 42
    assert probe.call("count") == 1
    assert probe.call("owner") == alice.address


def test_call_reads_historical_blocks(chain, probe):
    alice = chain.dev_accounts[0]
    probe.transact("store", 1, 10, sender=alice)
    before = chain.get_block_number()
    probe.transact("store", 1, 20, sender=alice)
    assert probe.call("values", 1, block=before) == 10
    assert probe.call("values", 1) == 20


def test_value_transfer_and_payable(chain, probe):
    alice, bob = chain.dev_accounts[:2]
    start = chain.get_balance(probe.address)
    probe.transact("pay", sender=bob, value=10**15)
    fresh = Account.create()
    chain.transfer(alice, fresh.address, 12345)
    assert chain.get_balance(probe.address) - start == 10**15
    assert chain.get_balance(fresh.address) == 12345


def test_error_string_revert_is_decoded(chain, probe):
    with pytest.raises(TransactionReverted) as info:
        probe.call("failWithMessage", "stake is locked")
    assert str(info.value) == "ChainProbe.failWithMessage reverted: 'stake is locked'"
    assert info.value.error == "Error"
    assert info.value.error_args == {"message": "stake is locked"}


def test_panic_revert_is_decoded(chain, probe):
    with pytest.raises(TransactionReverted, match=r"Panic\(0x12: division or modulo by zero\)") as info:
        probe.call("failWithPanic", 0)
    assert info.value.error_args == {"code": 0x12}


def test_custom_error_in_a_call_names_its_arguments(chain, probe):
    bob = chain.dev_accounts[1]
    with pytest.raises(TransactionReverted) as info:
        probe.call("onlyOwner", sender=bob.address)
    assert str(info.value) == f"ChainProbe.onlyOwner reverted: NotOwner(caller={bob.address})"
    assert info.value.error_args == {"caller": bob.address}


def test_custom_error_in_a_transaction_is_raised_before_sending(chain, probe):
    alice = chain.dev_accounts[0]
    nonce_before = chain.w3.eth.get_transaction_count(alice.address)
    with pytest.raises(TransactionReverted, match=r"^ChainProbe.pay reverted: ValueTooLow\(required=1000000000000000, sent=5\)$"):
        probe.transact("pay", sender=alice, value=5)
    assert chain.w3.eth.get_transaction_count(alice.address) == nonce_before
    probe.transact("store", 1, 1, sender=alice)  # the refused send spent no nonce
    assert chain.w3.eth.get_transaction_count(alice.address) == nonce_before + 1


def test_mined_revert_is_explained_by_replay(chain, probe):
    alice = chain.dev_accounts[0]
    with pytest.raises(TransactionReverted, match=r"ChainProbe.pay reverted: ValueTooLow\(required=1000000000000000, sent=5\) in block \d+") as info:
        probe.transact("pay", sender=alice, value=5, gas=100_000)  # explicit gas: no estimate, so it is mined
    assert info.value.error == "ValueTooLow"
    assert info.value.error_args == {"required": 10**15, "sent": 5}


def test_concurrent_sends_from_one_sender_get_distinct_nonces(chain, probe):
    alice = chain.dev_accounts[0]
    first = chain.w3.eth.get_transaction_count(alice.address)
    hashes, errors = [], []

    def worker(base):
        try:
            for i in range(5):
                hashes.append(probe.send("store", base + i, base + i, sender=alice, gas=120_000))
        except Exception as exc:  # surfaced below; a thread cannot raise into pytest
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(100 * t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    receipts = [chain.wait_for_receipt(h) for h in hashes]
    nonces = sorted(chain.w3.eth.get_transaction(r["transactionHash"])["nonce"] for r in receipts)
    assert nonces == list(range(first, first + 30))
    assert probe.call("count") == 30


def test_nonce_resyncs_after_the_key_is_used_elsewhere(chain, probe):
    alice = chain.dev_accounts[0]
    probe.transact("store", 1, 1, sender=alice)  # the manager now caches alice's next nonce
    outside = alice.sign_transaction({
        "to": chain.dev_accounts[1].address, "value": 1, "gas": 21_000, "chainId": chain.chain_id,
        "nonce": chain.w3.eth.get_transaction_count(alice.address), "gasPrice": 10 * chain.get_block()["baseFeePerGas"],
    })
    chain.w3.eth.send_raw_transaction(outside.raw_transaction)
    with pytest.raises(ChainError, match="nonce"):
        probe.send("store", 2, 2, sender=alice, gas=120_000)
    probe.transact("store", 2, 2, sender=alice)  # the failure dropped the stale nonce
    assert probe.call("values", 2) == 2


def test_receipt_wait_times_out_then_arrives_when_mined(chain, probe):
    chain.set_automine(False)
    tx_hash = probe.send("store", 3, 3, sender=chain.dev_accounts[0], gas=120_000)
    with pytest.raises(ChainTimeout, match="no receipt"):
        chain.wait_for_receipt(tx_hash, timeout_s=0.2)
    chain.mine(1)
    assert chain.wait_for_receipt(tx_hash, timeout_s=5)["status"] == 1
    chain.set_automine(True)


def test_snapshot_and_revert(chain, probe):
    alice = chain.dev_accounts[0]
    probe.transact("store", 1, 1, sender=alice)
    snapshot = chain.snapshot()
    probe.transact("store", 1, 99, sender=alice)
    assert probe.call("values", 1) == 99
    chain.revert(snapshot)
    assert probe.call("values", 1) == 1
    probe.transact("store", 2, 2, sender=alice)  # nonces were re-read after the revert
    assert probe.call("count") == 2


def test_mine_and_increase_time(chain, probe):
    start = chain.get_block()
    chain.mine(3)
    assert chain.get_block_number() == start["number"] + 3
    chain.increase_time(3600)
    latest = chain.get_block()
    assert latest["timestamp"] - start["timestamp"] >= 3600
    number, timestamp = probe.call("blockInfo")
    assert timestamp >= latest["timestamp"]


def test_unknown_contract_and_unreachable_rpc_fail_clearly(artifacts):
    from verillm.chain.anvil import find_free_port

    with pytest.raises(ChainUnavailable, match="unreachable"):
        RpcChain(f"http://127.0.0.1:{find_free_port()}", artifacts=artifacts)
