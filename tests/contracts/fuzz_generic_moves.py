"""What the generic adversary's colluders can compute (`fuzz_generic`, issue 34): for a function
whose calldata needs their own secrets or a chain of public data (a receipt over the data a
colluder commits to, a seal and its opening, a contest's challenged cells, an adjudication's
proven pairs, an escalation's bond, a promise), the argument lists the protocol's own client would
build from it (`Protocol`'s methods, captured before they send: `capture`). `_propose_<function>`
per ABI name: a function without one is still searched, from calldata seen and values synthesized.
A mixin of `GenericMachine`.
"""

from verillm.errors import VerillmError
from verillm.spec.audit import compute_appeal_cells, compute_vote_salt
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.types import SamplingParams

from helpers.contracts import CHEAT_OFFSET, LAYERS, OUTPUT_TOKENS, PRESET, PROMPT_LEN
from fuzz_delivery import TRANSCRIPT, signed_member
from fuzz_honest import ABANDONED, COMMITTING, DECIDED, OPENING, SETTLED

class _Captured(Exception):
    """Raised by the capturing sender: the call the protocol's client would have sent."""

    def __init__(self, handle, function, args, value):
        super().__init__(function)
        self.call = (handle, function, tuple(args), value)


def capture(protocol, method, *args):
    """The (handle, function, args, value) ``protocol.method(*args)`` would send, or None when its
    client refuses the arguments (a missing leaf, a bad cell)."""
    inner = protocol.__dict__.get("_send")

    def raiser(handle, function, *call_args, sender=None, value=0, **_):
        raise _Captured(handle, function, call_args, value)

    protocol._send = raiser
    try:
        method(*args)
    except _Captured as got:
        return got.call
    except (VerillmError, KeyError, ValueError):
        return None
    finally:
        if inner is None:
            del protocol._send
        else:
            protocol._send = inner
    return None



class ColluderMoves:
    """Mixin of `GenericMachine` (see the module note)."""

    def _live(self) -> list:
        return [t for t in self.audits if self.audit(t.run.audit_id).phase not in (SETTLED, ABANDONED)]

    def _seats(self, t, round_index: int) -> list[tuple[int, int]]:
        """(slot, node) of the colluders' seats in the round."""
        return [(slot, self._index(a)) for slot, a in enumerate(self.committee(t.run.audit_id, round_index))
                if self._index(a) in self.adversaries]

    def _colluder(self, t, i: int, rng):
        """Colluder ``i``'s member party in audit ``t``: the data its receipt committed to, drawn once
        per (audit, node) — the colluders' shared fabricated trace, a copy of a cheating worker's
        data (it agrees with the cheat), or honest data (it did the work; its vote may still lie)."""
        key = (t.run.audit_id, i)
        if key not in self.colluder_data:
            self.colluder_data[key] = rng.choice(("fabricated", "fabricated", "cheat", "honest"))
        kind = self.colluder_data[key]
        if kind == "honest":
            return self._member(i)
        pkey = ("member", i, kind, 0)
        if pkey not in self.parties:
            offset = 0.3 if kind == "fabricated" else CHEAT_OFFSET
            self.parties[pkey] = signed_member(self.world, self.world.make_member(self._node(i), offset=offset))
            self.parties[pkey].key = pkey
        return self.parties[pkey]

    def _proposals(self, contract: str, function: str, rng) -> list:
        """[(args, value, sender hint, on_success)] the colluders can build for this function now."""
        build = getattr(self, f"_propose_{function}", None)
        if build is None:
            return []
        out = []
        for item in build(rng):
            call = capture(self.p, *item[0])
            if call is not None and getattr(self.p, contract).address == call[0].address:
                out.append((call[2], call[3], item[1], item[2] if len(item) > 2 else None))
        return out

    def _pick_live(self, rng, phases, seated: bool = False):
        """A live audit in one of ``phases`` (``seated``: whose current round seats a colluder: it
        knows where its seats are)."""
        live = [t for t in self._live() if self.audit(t.run.audit_id).phase in phases]
        if seated:
            live = [t for t in live if self._seats(t, self.audit(t.run.audit_id).round)]
        return rng.choice(live) if live else None

    def _propose_postCommitteeReceipt(self, rng):
        t = self._pick_live(rng, (COMMITTING,), seated=True)
        if t is None:
            return []
        r = self.audit(t.run.audit_id).round
        return [((self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, self._colluder(t, i, rng).receipt), None)
                for slot, i in self._seats(t, r) if self.party(t.run.audit_id, r, slot + 1)["root"] == bytes(32)]

    def _propose_claimUndelivered(self, rng):
        t = self._pick_live(rng, (COMMITTING,), seated=True)
        if t is None:
            return []
        r = self.audit(t.run.audit_id).round
        return [((self.p.claim_undelivered, self._node(i).account, t.run.audit_id, slot), self._node(i).account) for slot, i in self._seats(t, r)
                if self.party(t.run.audit_id, r, slot + 1)["root"] == bytes(32) and rng.random() < 0.3]

    def _propose_sealVote(self, rng):
        t = self._pick_live(rng, (OPENING,), seated=True)
        if t is None:
            return []
        a, r = t.run.audit_id, self.audit(t.run.audit_id).round
        if self.audit(a).challenge_seed == bytes(32):
            return []
        out = []
        rs = self.round_state(a)
        if not rs.worker_opened:
            return []
        for slot, i in self._seats(t, r):
            party = self.party(a, r, slot + 1)
            if party["root"] == bytes(32) or party["hash"] != bytes(32):
                continue
            colluded = self.votes.get((a, r))
            agree = colluded if colluded is not None and rng.random() < 0.9 else rng.random() < 0.5
            opening = self._opening(t, self._colluder(t, i, rng), r)
            salt = compute_vote_salt(bytes(self._node(i).account.key), a, r, slot)

            def sealed(key=(a, r, slot), vote=(opening, agree, salt), round_key=(a, r), agree=agree):
                self.preimages[key] = vote
                self.votes.setdefault(round_key, agree)
            out.append(((self.p.seal_vote, self._node(i).account, a, r, slot, opening, agree, salt), self._node(i).account, sealed))
        return out

    def _propose_openAndVote(self, rng):
        out = []
        for (a, r, slot), vote in list(self.preimages.items()):
            t = next((x for x in self.audits if x.run.audit_id == a), None)
            if t is None or self.audit(a).phase != OPENING or self.audit(a).round != r or self.party(a, r, slot + 1)["opened"]:
                continue
            i = self._index(self.committee(a, r)[slot])

            def opened(t=t, key=(r, slot), vote=vote):
                t.revealed[key] = vote  # public now: its calldata shows it
            out.append(((self.p.open_and_vote, self._node(i).account, a, slot, *vote), self._node(i).account, opened))
        return out

    def _propose_escalate(self, rng):
        t = self._pick_live(rng, (DECIDED,))
        return [] if t is None else [((self.p.escalate, self.world.outsider, t.run.audit_id), None)]

    def _challenge_cells(self, a: int, r: int, positions: int) -> list:
        seed = bytes(self.jobs("getRound", a, r)[4])
        if seed == bytes(32):
            return []
        challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
        return sorted(set(compute_opened_cells(challenge, positions)))

    def _propose_contest(self, rng):
        t = self._pick_live(rng, (OPENING, DECIDED))
        if t is None:
            return []
        state = self.audit(t.run.audit_id)
        r = rng.choice(sorted({0, state.round}))
        slot = rng.randrange(len(self.committee(t.run.audit_id, r)) + 1)
        cells = self._challenge_cells(t.run.audit_id, r, state.num_positions + (1 if slot else 0))
        if not cells:
            return []
        return [((self.p.contest, self.world.outsider, t.run.audit_id, r, slot, cells[:rng.randrange(1, len(cells) + 1)]), None)]

    def _openings_of(self, t, r: int) -> dict:
        """slot (from 1) → an opening public for the round's seats (revealed) or the colluders' own."""
        out = {}
        for (round_index, slot), vote in t.revealed.items():
            if round_index == r:
                out[slot + 1] = vote[0]
        for (a, round_index, slot), vote in self.preimages.items():
            if a == t.run.audit_id and round_index == r:
                out[slot + 1] = vote[0]
        return out

    def _propose_adjudicate(self, rng):
        t = self._pick_live(rng, (OPENING, DECIDED))
        if t is None:
            return []
        r = rng.choice(sorted({0, self.audit(t.run.audit_id).round}))  # round 0's seats stay adjudicable through the appeal
        posted = t.posted_by_round.get(r)
        if posted is None:
            return []
        only = set(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS)) if rng.random() < 0.5 else None  # the cells every round checks
        return [((self.p.adjudicate, self.world.outsider, t.run.audit_id, r, slot, posted, opening, only), None)
                for slot, opening in self._openings_of(t, r).items()]

    def _propose_adjudicateAcrossRounds(self, rng):
        t = self._pick_live(rng, (OPENING, DECIDED))
        if t is None or self.audit(t.run.audit_id).round == 0:
            return []
        first, appeal = self._openings_of(t, 0), self._openings_of(t, 1)
        cells = sorted(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS))
        return [((self.p.adjudicate_across_rounds, self.world.outsider, t.run.audit_id, s, a, m, ref, cells), None)
                for s, m in first.items() for a, ref in appeal.items()]

    def _propose_answerContest(self, rng):
        out = []
        for cid in range(self.disputes("contestCount")):
            c = self.disputes("getContest", cid)
            t = next((x for x in self.audits if x.run.audit_id == c[0]), None)
            if not c[3] or t is None:
                continue
            opening = self._openings_of(t, c[1]).get(c[2])
            if opening is not None:
                out.append(((self.p.answer_contest, self.world.outsider, cid, self._contest_cells(cid), opening), None))
        return out

    def _propose_claimOmitted(self, rng):
        return [((self.p.claim_omitted, self.world.outsider, pr.signed), None) for pr in self.promises[-4:]]

    def _propose_publishTranscript(self, rng):
        t = self._pick_live(rng, (COMMITTING,))
        return [] if t is None else [((self.p.publish_transcript, self.world.outsider, t.run.audit_id, list(TRANSCRIPT), SamplingParams()), None)]

