"""Omission claims replayed through the real Coverage contract and compared with the simulator.

A case is one job served by a dispatcher that signs a batching promise
(`verillm.spec.spec_promise.sign_promise`, the Coverage domain) and a client that claims
non-inclusion after `batchByBlock` (`claimOmitted`, bonded):

- omission-slashed: a self-dispatched cheat batches its other jobs but never the cheated
  receipt; nobody can answer, and after the proof window `slashOmission` slashes it;
- omission-answered: the dispatcher batched the receipt in time; the claim is a grief, and
  `proveIncluded` answers it with the Merkle proof (the dispatcher is paid its answer's gas,
  capped at the bond; the claimant gets the rest back).

The replay compares every node's stake change and credit, the claimant's credit and the fee
pool's change to the wei with `verillm.sim.omission.settle_omission` under the replayer's rules.
Every chain action is reverted after its case.
"""

import numpy as np

from verillm.spec import promise as spec_promise
from verillm.sim.audit import Behaviour
from verillm.sim.omission import settle_omission
from verillm.sim.replay import ReplayCase, ReplayResult
from verillm.sim.replay_chain import compute_receipt_hash

OMISSION_KINDS = ("omission-slashed", "omission-answered")
OTHER_RECEIPTS = 3
"""Receipts of the dispatcher's other jobs, batched with (answered) or without (slashed) the
promised one."""
CLIENT_ACCOUNT = 8
"""The claimant: a dev account that is no node (a client holding the promise)."""


def sample_omission_cases(count: int, adversarial: np.ndarray, first_index: int, seed: int = 0) -> list[ReplayCase]:
    """``count`` claims alternating between the kinds; the slashed one's dispatcher is adversarial
    and serves itself, the answered one's is any node."""
    rng = np.random.default_rng(seed + 1_000_003)
    adv = np.flatnonzero(adversarial)
    cases = []
    for i in range(count):
        kind = OMISSION_KINDS[i % len(OMISSION_KINDS)]
        slashed = kind == "omission-slashed"
        node = int(rng.choice(adv)) if slashed else int(rng.integers(len(adversarial)))
        cases.append(ReplayCase(first_index + i, kind, Behaviour(), node, node, slashed, 0.0, int(rng.integers(2**31))))
    return cases


def replay_omission(replayer, case: ReplayCase) -> ReplayResult:
    try:
        return _replay_omission(replayer, case)
    finally:
        replayer.chain.revert(replayer.base)
        replayer.base = replayer.chain.snapshot()


def _replay_omission(replayer, case: ReplayCase) -> ReplayResult:
    w, p, chain, pre = replayer.world, replayer.world.protocol, replayer.chain, replayer.preset
    res = ReplayResult(case)
    client = chain.dev_accounts[CLIENT_ACCOUNT]
    dispatcher = w.nodes[case.dispatcher]
    included = case.kind == "omission-answered"
    stakes0, credits0 = w.balances()
    client_credit0 = p.get_credit(client.address)
    receipt, _ = w.receipt(dispatcher, w.worker_trace(case.cheated), member=False, nonce=20_000 + case.index)
    promised = compute_receipt_hash(receipt)
    head = chain.get_block_number()
    promise = spec_promise.BatchPromise(promised, bytes.fromhex(dispatcher.address[2:]), spec_promise.compute_batch_by_block(head, pre.BATCH_BY_BLOCKS))
    signed = spec_promise.sign_promise(promise, dispatcher.account.key, p.get_promise_domain())
    others = [compute_receipt_hash(w.receipt(dispatcher, w.worker_trace(False), member=False, nonce=30_000 + 8 * case.index + k)[0])
              for k in range(OTHER_RECEIPTS)]
    hashes = others[:1] + [promised] + others[1:] if included else others
    posted = p.post_batch(dispatcher.account, hashes).value
    chain.mine(max(0, promise.batch_by_block + 1 - chain.get_block_number()))
    claim_id = p.claim_omitted(client, signed).value
    res.claims = 1
    pool0 = p.jobs.call("feePoolWei")
    gas_price_wei = 0
    if included:
        answer = p.prove_included(dispatcher.account, claim_id, posted.batch_id, spec_promise.compute_inclusion_proof(hashes, promised))
        gas_price_wei = answer.receipt["effectiveGasPrice"]
    else:
        chain.mine(pre.PROOF_WINDOW_BLOCKS + 1)
        p.slash_omission(w.outsider, claim_id)
    state = p.get_omission_claim(claim_id)["state"]
    res.omission_slashed = state == spec_promise.SLASHED
    expected = settle_omission(pre, replayer.rules, stakes0[case.dispatcher], included, gas_price_wei)
    _compare(res, w, stakes0, credits0, expected, case.dispatcher)
    client_credit = p.get_credit(client.address) - client_credit0
    if client_credit != expected.claimant_credit_wei:
        res.mismatches.append(f"claimant credit: simulator {expected.claimant_credit_wei}, contracts {client_credit} wei")
    pool = p.jobs.call("feePoolWei") - pool0
    if pool != expected.fee_pool_wei:
        res.mismatches.append(f"fee pool: simulator +{expected.fee_pool_wei}, contracts +{pool} wei")
    return res


def _compare(res, world, stakes0, credits0, expected, dispatcher: int) -> None:
    stakes1, credits1 = world.balances()
    for i in range(len(stakes0)):
        slashed = stakes0[i] - stakes1[i]
        credit = credits1[i] - credits0[i]
        want_slash = expected.dispatcher_slashed_wei if i == dispatcher else 0
        want_credit = expected.dispatcher_credit_wei if i == dispatcher else 0
        if slashed != want_slash:
            res.mismatches.append(f"node {i} slashed: simulator {want_slash}, contracts {slashed} wei")
        if credit != want_credit:
            res.mismatches.append(f"node {i} credit: simulator {want_credit}, contracts {credit} wei")
