"""Writes the Foundry invariant campaign's starting world (contracts/fuzz/world/, issue 34).

The world is the Python generic fuzzer's (`tests/contracts/generic_fuzz.py`): the six contracts
deployed by the project's own deployer with the MINIMAL preset, the test model, its twelve nodes
and eight more (FORGE_EXTRA_NODES: 12, 14, 16, 18 honest, 13, 15, 17, 19 colluders, one unit each —
a decider needs at least 15 eligible nodes: worker, dispatcher, 3 + 5 + 5 fresh seats, and one
more per redrawn seat) registered with their stakes
and BLS keys, colluder 5 topped up, then every stake tripled (FORGE_STAKE_MULTIPLE: a 1% penalty
no longer unlists a node), the chain advanced to the next epoch. Adversarial stake: 12 of 25
units (48%), as the Python world's 8 of 17. The state comes from a real anvil (`anvil_dumpState`), written as Foundry allocs so the
campaign loads exactly what the Python harness starts from (`vm.loadAllocs`). Beside it, what
the honest actors need and Solidity cannot compute cheaply: each trace's leaves and Merkle
proofs (honest and cheating worker, each node's honest member trace, the colluders' fabricated
one), the transcript, and each node's keys.

Run: .venv/bin/python contracts/fuzz/make_world.py   (then commit contracts/fuzz/world/; after any change
to contracts/src, `node contracts/compile.js` first: tests/contracts/test_fuzz_forge.py fails while the
committed world's code differs from what the artifacts deploy)
    .venv/bin/python contracts/fuzz/make_world.py --out DIR --artifacts DIR   (another world, e.g. the
    can-fail check's, from other artifacts)
"""

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "contracts")]

from verillm.chain.anvil import AnvilConfig, AnvilProcess  # noqa: E402
from verillm.chain.artifacts import ArtifactStore  # noqa: E402
from verillm.spec import vrf  # noqa: E402
from verillm.spec.commitment import compute_leaf_bytes  # noqa: E402
from verillm.spec.delivery import encode_transcript_tokens  # noqa: E402
from verillm.spec.job import compute_tokens_hash  # noqa: E402
from verillm.spec.merkle import compute_merkle_proof  # noqa: E402

from helpers.contracts import CHEAT_OFFSET, LAYERS, MODEL_ID, OUTPUT_TOKENS, PRESET, PROMPT_LEN, TEST_ARTIFACTS, World, connect  # noqa: E402
from fuzz_delivery import INPUT_TOKENS, TRANSCRIPT, TRANSCRIPT_HASH  # noqa: E402
from generic_fuzz import ADVERSARY_TOP_UP, GENERIC_ADVERSARIES, GENERIC_EXTRA_NODES, GENERIC_HONEST  # noqa: E402
from fuzz_honest import CHEATER  # noqa: E402
from test_fuzz_generic import GENESIS_TIMESTAMP_S  # noqa: E402

OUT = Path(__file__).resolve().parent / "world"
# Twenty nodes (Cast.sol's NODES): the Python world's twelve and eight more, so that a decider
# round (round 2: five fresh seats after round 0's three, the appeal's five, the worker, the
# dispatcher and every member replaced by a redraw) can be drawn. At sixteen nodes every decider
# the campaign entered ended "pool exhausted" (6 of 6 in 125,000 calls, seeds 1-3).
FORGE_EXTRA_NODES = GENERIC_EXTRA_NODES + 8
FORGE_HONEST = GENERIC_HONEST + (12, 14, 16, 18)
FORGE_ADVERSARIES = GENERIC_ADVERSARIES | {13, 15, 17, 19}
# Every stake tripled (shares unchanged): at one MIN_STAKE_WEI unit a node's first 1% penalty (a
# minority vote in a captured round) unlists it, shrinking the pool the decider is drawn from.
FORGE_STAKE_MULTIPLE = 3
OUTSIDER_VRF = vrf.derive_secret_key(b"\x99" * 32)  # the outsider's own key: it may register a fresh identity


def _words(point: bytes) -> list[str]:
    return [hex(w) for w in vrf.compute_words(point)]


def _hex(b: bytes) -> str:
    return "0x" + b.hex()


def _trace(party) -> dict:
    leaves = compute_leaf_bytes(party.trace, LAYERS)
    levels = party.commitment.levels
    return {"root": _hex(party.commitment.root), "numPositions": party.trace.num_positions, "leafSize": len(leaves[0]),
            "leaves": _hex(b"".join(leaves)),
            "proofs": [[_hex(s) for s in compute_merkle_proof(levels, i).siblings] for i in range(len(leaves))]}


def _allocs(dump: dict) -> dict:
    out = {}
    for address, account in dump["accounts"].items():
        entry = {"balance": hex(int(account["balance"], 16)), "nonce": hex(int(account["nonce"])) if isinstance(account["nonce"], int)
                 else account["nonce"]}
        if account.get("code") and account["code"] != "0x":
            entry["code"] = account["code"]
        if account.get("storage"):
            entry["storage"] = {k: v for k, v in account["storage"].items()}
        out[address] = entry
    return out


def main(out: Path = OUT, artifacts: Path | None = None) -> None:
    with AnvilProcess(AnvilConfig(genesis_timestamp_s=GENESIS_TIMESTAMP_S)) as process:
        chain = connect(process)
        if artifacts is not None:  # the protocol's contracts from another artifacts directory first
            chain.artifacts = ArtifactStore((Path(artifacts), TEST_ARTIFACTS))
        world = World(chain, extra_nodes=FORGE_EXTRA_NODES)
        for i, units in ADVERSARY_TOP_UP.items():
            world.protocol.top_up(world.nodes[i].account, units * PRESET.MIN_STAKE_WEI)
        for node in world.nodes:
            world.protocol.top_up(node.account, (FORGE_STAKE_MULTIPLE - 1) * world.protocol.get_node(node.address)["stake_wei"])
        world.protocol.advance_to_next_epoch()
        block = chain.get_block()
        raw = chain.w3.provider.make_request("anvil_dumpState", [])["result"]
        dump = json.loads(gzip.decompress(bytes.fromhex(raw[2:])))
        honest_worker = world.make_worker(world.nodes[0])
        cheat_worker = world.make_worker(world.nodes[0], offset=CHEAT_OFFSET)
        fabricated = world.make_member(world.nodes[5], offset=0.3)
        members = [world.make_member(n) for n in world.nodes]
        roles = {i: "honest" for i in FORGE_HONEST} | {i: "colluder" for i in FORGE_ADVERSARIES} | {CHEATER: "cheater"}
        assert len(roles) == len(world.nodes), "every node of the forge world has a role"
        meta = {
            "note": "written by contracts/fuzz/make_world.py; the allocs beside it are the chain state",
            "blockNumber": block["number"], "timestamp": block["timestamp"], "chainId": chain.chain_id,
            "registry": world.protocol.registry.address, "jobs": world.protocol.jobs.address, "batches": world.protocol.batches.address,
            "disputes": world.protocol.disputes.address, "delivery": world.protocol.delivery.address,
            "coverage": world.protocol.coverage.address, "modelId": _hex(MODEL_ID),
            "promptLen": PROMPT_LEN, "outputTokens": OUTPUT_TOKENS, "layers": list(LAYERS),
            "inputHash": _hex(compute_tokens_hash(INPUT_TOKENS)), "transcriptHash": _hex(TRANSCRIPT_HASH),
            "transcript": _hex(encode_transcript_tokens(list(TRANSCRIPT))),
            "outsider": {"address": world.outsider.address, "key": _hex(bytes(world.outsider.key)), "vrfKey": hex(OUTSIDER_VRF),
                         "vrfPublicKey": _words(vrf.compute_public_key(OUTSIDER_VRF)),
                         "pop": _words(vrf.compute_possession_proof(OUTSIDER_VRF, bytes.fromhex(world.outsider.address[2:])))},
            "params": {"minStakeWei": PRESET.MIN_STAKE_WEI, "jobFeeWei": PRESET.JOB_FEE_WEI, "auditFeeWei": PRESET.AUDIT_FEE_WEI,
                       "disputeBondWei": PRESET.DISPUTE_BOND_WEI, "omissionClaimBondWei": PRESET.OMISSION_CLAIM_BOND_WEI,
                       "deliveryClaimBondWei": PRESET.DELIVERY_CLAIM_BOND_WEI, "memberPenaltyBps": PRESET.MEMBER_PENALTY_BPS,
                       "receiptHorizonBlocks": PRESET.RECEIPT_HORIZON_BLOCKS, "batchByBlocks": PRESET.BATCH_BY_BLOCKS,
                       "committeeSize": PRESET.COMMITTEE_SIZE, "challengePositions": PRESET.CHALLENGE_POSITIONS},
            "sampling": [0, 0, 1_000_000, 0],
            "nodes": [{"address": n.address, "key": _hex(bytes(n.account.key)), "vrfKey": hex(n.vrf_key), "role": roles[i],
                       "vrfPublicKey": _words(vrf.compute_public_key(n.vrf_key)),
                       "pop": _words(vrf.compute_possession_proof(n.vrf_key, bytes.fromhex(n.address[2:])))}
                      for i, n in enumerate(world.nodes)],
            "traces": {"honestWorker": _trace(honest_worker), "cheatWorker": _trace(cheat_worker), "fabricated": _trace(fabricated),
                       "members": [_trace(m) for m in members]},
        }
    out.mkdir(parents=True, exist_ok=True)
    (out / "allocs.json").write_text(json.dumps(_allocs(dump), indent=0, sort_keys=True) + "\n")
    (out / "world.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"world at block {meta['blockNumber']}: {len(meta['nodes'])} nodes, {len(dump['accounts'])} accounts -> {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="write the Foundry campaign's starting world")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--artifacts", type=Path, default=None, help="artifacts that replace the committed ones (same names)")
    args = parser.parse_args()
    main(args.out, args.artifacts)
