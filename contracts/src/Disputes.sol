// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {AuditCodes, AuditView, Deadlines, PartyView, Phase, RoundState} from "./AuditTypes.sol";
import {Fingerprint} from "./Fingerprint.sol";
import {Jobs} from "./Jobs.sol";
import {MerkleLib} from "./MerkleLib.sol";
import {Domains, Params, ProtocolParams} from "./Params.sol";
import {Registry} from "./Registry.sol";

/// @notice Where openings are adjudicated on-chain, only when someone contests:
/// - `contest`: a bonded demand that a party prove some of its opened leaves against its
///   committed root. Unanswered within proofWindowBlocks → the party is slashed and the
///   challenger refunded and rewarded; answered → the bond goes to the party: a worker at once; a
///   member once it can no longer be proven a liar, or back to the challenger if it is
///   (`releaseBond`; held in Jobs' pool meanwhile).
/// - `adjudicate`: anyone with both parties' leaves and proofs re-runs the tolerance test and
///   the token check for one member; a member whose vote contradicts its own committed data
///   is slashed.
/// - `escalate`: a bonded call for a fresh, larger committee (handled by Jobs), open only to a
///   party with standing: the worker (against a FAIL or a TIE), the dispatcher, or a first-round
///   member that voted against the majority (in a TIE: any that voted).
/// - `adjudicateAcrossRounds`: a first-round minority "agree" whose data an appeal that decided
///   FAIL contradicts (a majority of its seats' proven cells) is slashed: two rounds against it.
/// Undelivered committee jobs (claim, publish, the worker's default) are `Delivery`'s.
contract Disputes is ReentrancyGuard {
    struct Contest {
        uint64 auditId;
        uint8 round;
        uint8 slot;
        bool open;
        address challenger;
        uint64 deadline;
        uint256 bondWei;
        bytes32 cellsHash;
        bool answered; // a member's leaves proven: its bond held (in Jobs' pool) until `releaseBond`
        bool released; // that bond paid: to the member, or back to the challenger if it lied
    }

    /// @dev Per member (audit, round, slot) (docs/protocol.md §12 "Accountable votes": a hunt
    /// that proves a liar costs the hunter nothing).
    struct Hunt {
        uint64 firstAnswered; // contestId + 1 of the first answered contest: its challenger is paid the reward
        bool liar; // proven (adjudicated, or a lost contest): its answered contests' bonds go back
        uint256 contradictedBy; // a first-round agree: bit j set = appeal member j's proven data contradict it (adjudicateAcrossRounds)
    }

    /// @notice One cell opened by both the worker and a member, with their Merkle proofs.
    struct CellPair {
        bytes workerLeaf;
        bytes32[] workerSiblings;
        bytes memberLeaf;
        bytes32[] memberSiblings;
    }

    /// @notice The worker's opening as posted (its keccak256 is on-chain) and, per adjudicated
    /// cell, the index of the worker's leaf in it.
    struct PostedOpening {
        bytes leaves;
        uint32[] leafIndices;
    }

    /// @dev What a check over cells needs, read once.
    struct Context {
        uint256 numPositions; // the worker's: P + N − 1
        uint256 outputTokens;
        uint256 firstOutput; // P − 1
        bytes32 challengeSeed;
        uint256[] positions;
        Registry.ModelConfig model;
    }

    Jobs public immutable jobs;
    Registry public immutable registry;
    uint256 public immutable disputeBondWei;
    uint256 public immutable proofWindowBlocks;
    uint256 public immutable disputeWindowBlocks;
    uint256 public immutable challengePositions;
    uint256 public immutable slashRewardBps;

    /// A contest names at most this many cells: its answer stays far below the block gas limit
    /// (tests/contracts/test_attacks.py measures it); a party can be contested again.
    uint256 public constant MAX_CONTEST_CELLS = 16;

    Contest[] private contests;
    mapping(uint256 auditId => mapping(uint256 roundSlot => Hunt)) public hunts; // roundSlot = round << 8 | slot

    event Contested(uint256 indexed contestId, uint256 indexed auditId, uint8 round, uint8 slot, address indexed challenger, uint32[] positions, uint16[] layers);
    event ContestAnswered(uint256 indexed contestId);
    event ContestLost(uint256 indexed contestId, address indexed party, uint256 slashedWei);
    /// @notice The contested party was slashed in this audit by other means before the contest
    /// resolved: nothing is slashed twice, and the bond goes back to the challenger.
    event ContestMoot(uint256 indexed contestId);
    event Adjudicated(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member, bool dataAgrees, uint8 vote);
    /// @notice Appeal member `appealSlot`'s proven data contradict first-round agree `slot`'s; `count` such members so far.
    event Contradicted(uint256 indexed auditId, uint8 slot, uint8 appealSlot, uint256 count);
    /// @notice An answered contest's held bond paid: to its challenger when the member was proven a liar, else to the member.
    event BondReleased(uint256 indexed contestId, address indexed to, uint256 bondWei);

    error WrongBond(uint256 givenWei, uint256 expectedWei);
    error NotOpened(uint8 slot);
    error WindowClosed(uint256 closedAt);
    error NotChallenged(uint32 position, uint16 layer);
    error BadCells(string reason);
    error UnknownContest(uint256 contestId);
    error ContestClosed(uint256 contestId);
    error TooEarly(uint256 untilBlock);
    error OpeningMismatch();
    error LeafMismatch(uint256 cell);
    error InvalidMerkleProof(uint256 cell);
    error NoFault();
    error AlreadySlashed(uint8 slot);
    error NotRegistry();
    error NotCoverage();
    error NotHeld(uint256 contestId);
    error AlreadyCounted(uint8 appealSlot);
    /// @notice `caller` has no standing to appeal this audit (docs/protocol.md §12 "Standing").
    error NoStanding(address caller);

    constructor(Jobs jobs_, Registry registry_, ProtocolParams memory p) {
        if (keccak256(abi.encode(p)) != registry_.paramsHash()) revert Params.InvalidParams("not the Registry's parameters");
        jobs = jobs_;
        registry = registry_;
        disputeBondWei = p.disputeBondWei;
        proofWindowBlocks = p.proofWindowBlocks;
        disputeWindowBlocks = p.disputeWindowBlocks;
        challengePositions = p.challengePositions;
        slashRewardBps = p.slashRewardBps;
        memberPenaltyBps = p.memberPenaltyBps;
    }

    receive() external payable {
        if (msg.sender != address(registry)) revert NotRegistry();
    }

    /// @notice The omission challenge (Registry.coverage) books bonds and slashed stake as every
    /// other slash is booked: `creditWei` to `to`'s credit in Jobs, the rest to the audit fee pool.
    function relayCredit(address to, uint256 creditWei) external payable {
        if (msg.sender != registry.coverage()) revert NotCoverage();
        jobs.depositCredit{value: msg.value}(to, creditWei);
    }

    // --- silent seats (docs/protocol.md §12 "Committees": a seat that never answers costs its holder) ---

    uint256 public immutable memberPenaltyBps;
    address private constant PENALIZED = address(1);
    /// keccak256(auditId, round, attempt, slot) → the member seen holding that seat without a
    /// receipt (armed), PENALIZED once its penalty is taken.
    mapping(bytes32 => address) public silentSeats;

    /// @notice Seat (`round`, `attempt`, `slot`) seen silent (`penaltyWei` 0: armed), or its holder penalized.
    event SilentSeat(uint256 indexed auditId, uint8 round, uint8 attempt, uint8 slot, address indexed member, uint256 penaltyWei);

    error NotSilent(string reason);

    /// @notice A drawn member that never posts its receipt is redrawn (Jobs.replaceMissing) or its
    /// round abandoned, and pays memberPenaltyBps for the seat, once (anyone may call; the caller
    /// gets slashRewardBps of it). Jobs keeps no list of whom a redraw replaced, so the seat is
    /// first armed: while its round commits at `attempt`, the call records the member holding
    /// `slot` with no receipt (a member that posts later is never replaced, and pays nothing).
    /// Once the slot holds another member (the redraw replaced it: posted seats are never
    /// redrawn) or the round was abandoned with the seat still empty, the same call takes the
    /// penalty. A member whose job never came claims it (Delivery) and is neither replaced nor
    /// abandoned until the transcript is published and a full commit window has passed.
    function penalizeSilentSeat(uint256 auditId, uint8 round, uint8 attempt, uint8 slot) external nonReentrant {
        bytes32 key = keccak256(abi.encode(auditId, round, attempt, slot));
        address member = silentSeats[key];
        RoundState memory s = jobs.getRoundState(auditId, round);
        if (slot >= s.members) revert NotSilent("no such seat");
        PartyView memory seat = jobs.getParty(auditId, round, slot + 1);
        if (member == address(0)) {
            if (s.phase != Phase.COMMITTING || s.attempt != attempt || seat.root != bytes32(0)) revert NotSilent("not an empty seat of a committing round");
            silentSeats[key] = seat.node;
            emit SilentSeat(auditId, round, attempt, slot, seat.node, 0);
            return;
        }
        if (member == PENALIZED) revert NotSilent("already penalized");
        bool replaced = seat.node != member;
        if (!replaced && (s.phase != Phase.ABANDONED || seat.root != bytes32(0))) revert NotSilent("the seat is not replaced");
        silentSeats[key] = PENALIZED;
        uint256 taken = registry.penalize(member, memberPenaltyBps);
        jobs.depositCredit{value: taken}(msg.sender, taken * slashRewardBps / Params.BPS);
        emit SilentSeat(auditId, round, attempt, slot, member, taken);
    }

    // --- escalation ------------------------------------------------------------------------

    /// @notice Bond disputeBondWei to send a decided first round to a fresh committee of
    /// escalationCommitteeSize; refunded if it overturns the first verdict. Only a party with
    /// standing (docs/protocol.md §12 "Standing"): the worker against a FAIL or a TIE, the
    /// audit's dispatcher, or a first-round member that opened, is not slashed and voted against
    /// the majority (in a TIE: any such member). An outsider puts the worker and every honest
    /// voter at the risk of an appeal it has no stake in: `NoStanding`.
    function escalate(uint256 auditId) external payable nonReentrant {
        if (msg.value != disputeBondWei) revert WrongBond(msg.value, disputeBondWei);
        if (!_hasStanding(auditId, msg.sender)) revert NoStanding(msg.sender);
        jobs.startEscalation{value: msg.value}(auditId, msg.sender);
    }

    function _hasStanding(uint256 auditId, address caller) private view returns (bool) {
        (,, address dispatcher,,,,,) = jobs.getAuditExtra(auditId);
        if (caller == dispatcher) return true;
        uint8 majority = _majorityOf(auditId, 0);
        if (caller == jobs.getAudit(auditId).worker) return majority != AuditCodes.PASS;
        (,,,,,, address[] memory members) = jobs.getRound(auditId, 0);
        for (uint256 i = 0; i < members.length; i++) {
            if (members[i] != caller) continue;
            PartyView memory m = jobs.getParty(auditId, 0, uint8(i + 1));
            return m.opened && !m.slashed && (majority == AuditCodes.TIE || m.vote != majority);
        }
        return false;
    }

    /// @dev Round `round`'s majority as `Jobs` tallies it now: PASS, FAIL or TIE over the votes
    /// of members that opened and were not slashed.
    function _majorityOf(uint256 auditId, uint8 round) private view returns (uint8) {
        (,,,,,, address[] memory members) = jobs.getRound(auditId, round);
        uint256 agree;
        uint256 disagree;
        for (uint256 i = 0; i < members.length; i++) {
            PartyView memory m = jobs.getParty(auditId, round, uint8(i + 1));
            if (!m.opened || m.slashed) continue;
            if (m.vote == AuditCodes.AGREE) agree++;
            else disagree++;
        }
        return agree > disagree ? AuditCodes.PASS : disagree > agree ? AuditCodes.FAIL : AuditCodes.TIE;
    }

    // --- contests ----------------------------------------------------------------------------

    /// @notice Demand that party `slot` (0 = worker) of `round` prove its opened leaves at the
    /// given challenged cells against its committed root.
    function contest(uint256 auditId, uint8 round, uint8 slot, uint32[] calldata positions, uint16[] calldata layers)
        external
        payable
        nonReentrant
        returns (uint256 contestId)
    {
        if (msg.value != disputeBondWei) revert WrongBond(msg.value, disputeBondWei);
        if (positions.length == 0 || positions.length != layers.length) revert BadCells("one layer per position, at least one cell");
        if (positions.length > MAX_CONTEST_CELLS) revert BadCells("too many cells");
        PartyView memory party = jobs.getParty(auditId, round, slot);
        if (!party.opened) revert NotOpened(slot);
        if (party.slashed) revert AlreadySlashed(slot);
        _checkDisputeWindow(auditId, round);
        Context memory ctx = _context(auditId, round);
        for (uint256 i = 0; i < positions.length; i++) {
            if (i > 0 && (uint256(positions[i]) << 16 | layers[i]) <= (uint256(positions[i - 1]) << 16 | layers[i - 1])) {
                revert BadCells("cells must be sorted by (position, layer) without repeats");
            }
            if (!_isChallenged(ctx, positions[i], layers[i], party.numPositions)) revert NotChallenged(positions[i], layers[i]);
        }
        contestId = contests.length;
        contests.push(Contest(uint64(auditId), round, slot, true, msg.sender, uint64(block.number + proofWindowBlocks), msg.value, keccak256(abi.encode(positions, layers)), false, false));
        jobs.addPendingContest(auditId, 1);
        emit Contested(contestId, auditId, round, slot, msg.sender, positions, layers);
    }

    /// @notice Answer a contest (anyone may, usually the party): the party's whole opening as
    /// posted, and for each contested cell the index of its leaf in the opening and the proof.
    function answerContest(
        uint256 contestId,
        uint32[] calldata positions,
        uint16[] calldata layers,
        bytes calldata opening,
        uint256[] calldata leafIndices,
        bytes32[][] calldata siblings
    ) external nonReentrant {
        Contest storage c = _openContest(contestId);
        if (block.number > c.deadline) revert WindowClosed(c.deadline);
        if (keccak256(abi.encode(positions, layers)) != c.cellsHash) revert BadCells("not the contested cells");
        if (leafIndices.length != positions.length || siblings.length != positions.length) revert BadCells("one leaf index and proof per cell");
        PartyView memory party = jobs.getParty(c.auditId, c.round, c.slot);
        if (keccak256(opening) != party.openingHash) revert OpeningMismatch();
        Registry.ModelConfig memory model = registry.getModelConfig(jobs.getAudit(c.auditId).modelId);
        for (uint256 i = 0; i < positions.length; i++) {
            _proveOpenedCell(model, party, opening, leafIndices[i], siblings[i], (uint256(positions[i]) << 16) | layers[i], i);
        }
        c.open = false;
        jobs.addPendingContest(c.auditId, -1);
        if (party.slashed) {
            // Proven a liar (or slashed otherwise) while this contest ran: nothing goes to a
            // slashed party; the bond goes back to the challenger, as a moot contest's does.
            jobs.depositCredit{value: c.bondWei}(c.challenger, c.bondWei);
            emit ContestMoot(contestId);
            return;
        }
        if (c.slot == 0) {
            jobs.depositCredit{value: c.bondWei}(party.node, c.bondWei);
        } else {
            // A member's proofs show what it committed, not that it was honest: the bond waits
            // in the pool until it can no longer be proven a liar (releaseBond), so a liar
            // keeps no hunter's bond and a coalition contesting its own liar gains nothing.
            c.answered = true;
            Hunt storage h = hunts[c.auditId][_roundSlot(c.round, c.slot)];
            if (h.firstAnswered == 0) h.firstAnswered = uint64(contestId + 1);
            jobs.depositCredit{value: c.bondWei}(party.node, 0);
        }
        emit ContestAnswered(contestId);
    }

    /// @dev Leaf `leafIndex` of `opening` must be the cell (position << 16 | layer) and sit under
    /// the party's root.
    function _proveOpenedCell(
        Registry.ModelConfig memory model,
        PartyView memory party,
        bytes calldata opening,
        uint256 leafIndex,
        bytes32[] calldata siblings,
        uint256 cellKey,
        uint256 i
    ) private pure {
        uint256 length = Fingerprint.leafLength(model.fingerprintDims);
        bytes memory leaf = opening[leafIndex * length:(leafIndex + 1) * length];
        Fingerprint.Leaf memory decoded = Fingerprint.decodeLeaf(leaf, model.fingerprintDims);
        if ((uint256(decoded.position) << 16) | decoded.layer != cellKey) revert LeafMismatch(i);
        if (!_isUnderRoot(leaf, decoded, model, party.root, party.numPositions, siblings)) revert InvalidMerkleProof(i);
    }

    /// @notice After the proof window, an unanswered contest slashes the party; the challenger
    /// gets the bond back plus slashRewardBps of the slashed stake.
    function resolveContest(uint256 contestId) external nonReentrant {
        Contest storage c = _openContest(contestId);
        if (block.number <= c.deadline) revert TooEarly(c.deadline + 1);
        c.open = false;
        jobs.addPendingContest(c.auditId, -1);
        // Two contests can be open against one party; once the first (or an adjudication)
        // slashed it, the rest must still close, or settle() would wait on them forever.
        if (jobs.getParty(c.auditId, c.round, c.slot).slashed) {
            jobs.depositCredit{value: c.bondWei}(c.challenger, c.bondWei);
            emit ContestMoot(contestId);
            return;
        }
        address node = jobs.recordFault(c.auditId, c.round, c.slot);
        uint256 slashed = registry.slash(node);
        uint256 reward = slashed * slashRewardBps / Params.BPS;
        hunts[c.auditId][_roundSlot(c.round, c.slot)].liar = true; // its answered contests' bonds go back
        jobs.depositCredit{value: slashed + c.bondWei}(c.challenger, reward + c.bondWei);
        emit ContestLost(contestId, node, slashed);
    }

    // --- adjudication ------------------------------------------------------------------------

    /// @notice Re-run member `slot`'s comparison with the worker on-chain over `cells` (sorted by
    /// (position, layer), each challenged, each proven under both roots, the worker's leaf the
    /// one it posted, at workerLeafIndices[i] of its opening: votes are judged against exactly
    /// what the members were shown). A member whose committed data fail there is a provable
    /// liar, slashed in full (slashRewardBps of it, and the bond back, to the challenger of the
    /// first contest answered against it, else to the caller: `_payHunter`), when it voted "agree", or —
    /// whatever it voted — when a later round of the audit (the appeal) has decided PASS, its own
    /// round's majority passed too (two rounds against it), and every cell is one that round checked too: a last-layer token cell (every round opens and
    /// token-checks them), so the appeal majority's data contradict the member's on the very
    /// cell (docs/protocol.md §12 "Accountable votes"). Otherwise a "disagree" is not slashed
    /// here: it may rest on the stop rule, which needs the output tokens the contract does not
    /// have (a minority "disagree" is settled by the vote).
    function adjudicate(
        uint256 auditId,
        uint8 round,
        uint8 slot,
        CellPair[] calldata cells,
        PostedOpening calldata posted
    ) external
        nonReentrant
    {
        if (slot == 0) revert BadCells("slot 0 is the worker");
        PartyView memory member = jobs.getParty(auditId, round, slot);
        if (!member.opened) revert NotOpened(slot);
        _checkDisputeWindow(auditId, round);
        _checkPosted(auditId, round, cells, posted);
        Context memory ctx = _context(auditId, round);
        bool agrees = _compare(ctx, jobs.getParty(auditId, round, 0), member, cells);
        emit Adjudicated(auditId, round, slot, member.node, agrees, member.vote);
        if (agrees || (member.vote != AuditCodes.AGREE && !_isContradictedByAppeal(ctx, auditId, round, cells))) revert NoFault();
        jobs.recordFault(auditId, round, slot);
        _payHunter(auditId, round, slot, registry.slash(member.node));
    }

    /// @notice Count a contradiction of first-round member `slot`, which voted AGREE, once an
    /// appeal round decided FAIL (or the worker's default): the proven leaves of one of that
    /// round's DISAGREE voters (after a default: of any seat with a posted receipt; `appealSlot`,
    /// not slashed) fail against its own on last-layer token cells — cells every round opens and
    /// token-checks (docs/protocol.md §12 "Accountable votes"), and only when the first round's
    /// majority failed too (two rounds against the member; after an overturned PASS: `NoFault`).
    /// With a decider (round 2, after an appeal that passed what round 0 failed) the judges are
    /// the decider's seats: round 0 and the decider agreeing; while it runs, `NoFault`. The member is
    /// slashed once a majority of the appeal committee's seats (size / 2 + 1) contradicted it:
    /// one colluding DISAGREE with fabricated leaves cannot slash an honest agree alone (an honest
    /// agree's token cells match every honest appeal member's), colluders must hold the appeal.
    /// `cells[i].workerLeaf` carries the appeal member's leaf, `memberLeaf` the first-round
    /// member's, each proven against its committed root; sorted by position, without repeats. A
    /// cell fails outside the layer's band (Σ(Δ²) > d · maxCellErrorPpb²); in exact mode (a band
    /// of 0) also on any flag bit: bit for bit. An agree that vouched for a cheat the appeal
    /// convicted copied the worker's fabricated leaves, which `adjudicate` (against the worker)
    /// cannot see.
    function adjudicateAcrossRounds(uint256 auditId, uint8 slot, uint8 appealSlot, CellPair[] calldata cells) external nonReentrant {
        AuditView memory a = jobs.getAudit(auditId);
        uint8 verdict = a.round == 0 ? 0 : jobs.currentVerdict(auditId);
        if ((a.phase != Phase.DECIDED && a.phase != Phase.SETTLED) || (verdict != AuditCodes.FAIL && verdict != AuditCodes.WORKER_DEFAULT)) {
            revert NoFault(); // no appeal, or one that has not convicted the worker: nothing contradicts an agree
        }
        // Two rounds against the member, or no full slash (Proportionality): after an appeal
        // overturned a first-round PASS (or TIE), one captured round would otherwise convict
        // every honest agree; they keep the minority penalty of settlement.
        if (_majorityOf(auditId, 0) != AuditCodes.FAIL) revert NoFault();
        if (slot == 0 || appealSlot == 0) revert BadCells("slot 0 is the worker");
        PartyView memory member = jobs.getParty(auditId, 0, slot);
        PartyView memory judge = jobs.getParty(auditId, a.round, appealSlot);
        if (!member.opened) revert NotOpened(slot);
        // A FAIL: a disagree voter of the appeal. A worker default (a cheat that will not open in
        // the appeal, to shield its first-round partners): any seat that committed its data.
        if (verdict == AuditCodes.FAIL ? !judge.opened : judge.root == bytes32(0)) revert NotOpened(appealSlot);
        if (member.slashed) revert AlreadySlashed(slot);
        if (judge.slashed) revert AlreadySlashed(appealSlot); // a proven liar contradicts nobody
        if (member.vote != AuditCodes.AGREE || (verdict == AuditCodes.FAIL && judge.vote != AuditCodes.DISAGREE) || cells.length == 0) {
            revert NoFault();
        }
        _checkDisputeWindow(auditId, 0);
        Context memory ctx = _context(auditId, 0);
        uint256 last = ctx.model.committedLayers.length - 1;
        uint256 band = ctx.model.maxCellErrorPpb[last];
        bool contradicted;
        uint256 previous;
        for (uint256 i = 0; i < cells.length; i++) {
            (Fingerprint.Leaf memory j, Fingerprint.Leaf memory m, uint256 layerSlot) = _provenPair(ctx, judge, member, cells[i], i);
            if (layerSlot != last || j.position < ctx.firstOutput || j.position >= ctx.firstOutput + ctx.outputTokens) {
                revert NotChallenged(j.position, j.layer);
            }
            if (i > 0 && j.position <= previous) revert BadCells("cells must be sorted by position without repeats");
            previous = j.position;
            if (!Fingerprint.isCellWithin(Fingerprint.squaredError(j, m), ctx.model.fingerprintDims, band) || (band == 0 && j.flags != m.flags)) {
                contradicted = true;
            }
        }
        if (!contradicted) revert NoFault();
        Hunt storage h = hunts[auditId][_roundSlot(0, slot)];
        if (h.contradictedBy >> appealSlot & 1 != 0) revert AlreadyCounted(appealSlot);
        uint256 by = h.contradictedBy | 1 << appealSlot;
        h.contradictedBy = by;
        uint256 count;
        for (; by != 0; by &= by - 1) count++;
        emit Contradicted(auditId, slot, appealSlot, count);
        if (count <= a.committeeSize / 2) return;
        emit Adjudicated(auditId, 0, slot, member.node, false, member.vote);
        jobs.recordFault(auditId, 0, slot);
        _payHunter(auditId, 0, slot, registry.slash(member.node));
    }

    /// @dev Pay a proven liar's slash: the reward to the challenger of the first contest answered
    /// against it (the hunter whose answer published the proofs: whoever sends the adjudication,
    /// a front-runner included, gets nothing then), with that contest's held bond; the reward to
    /// the caller when no contest was answered; the rest of the stake to the fee pool. Its other
    /// answered contests' bonds go back to their challengers with `releaseBond`.
    function _payHunter(uint256 auditId, uint8 round, uint8 slot, uint256 slashed) private {
        uint256 reward = slashed * slashRewardBps / Params.BPS;
        Hunt storage h = hunts[auditId][_roundSlot(round, slot)];
        h.liar = true;
        if (h.firstAnswered == 0) {
            jobs.depositCredit{value: slashed}(msg.sender, reward);
            return;
        }
        Contest storage first = contests[h.firstAnswered - 1];
        jobs.depositCredit{value: slashed}(first.challenger, reward);
        _release(h.firstAnswered - 1, first, first.challenger);
    }

    /// @notice Pay an answered contest's held bond (anyone may call): back to its challenger once
    /// the member was proven a liar in the audit; to the member once it can no longer be (its
    /// round and any appeal after it past their dispute windows, or the audit over).
    function releaseBond(uint256 contestId) external nonReentrant {
        if (contestId >= contests.length) revert UnknownContest(contestId);
        Contest storage c = contests[contestId];
        if (!c.answered || c.released) revert NotHeld(contestId);
        if (hunts[c.auditId][_roundSlot(c.round, c.slot)].liar) return _release(contestId, c, c.challenger);
        (bool open, uint256 disputeBy) = _disputeWindow(c.auditId, c.round);
        (Phase phase,) = jobs.getDeadlines(c.auditId, jobs.getAudit(c.auditId).round);
        if (open || phase == Phase.DRAWING || phase == Phase.COMMITTING) revert TooEarly(disputeBy + 1);
        _release(contestId, c, jobs.getParty(c.auditId, c.round, c.slot).node);
    }

    function _release(uint256 contestId, Contest storage c, address to) private {
        c.released = true;
        jobs.creditFromPool(to, c.bondWei);
        emit BondReleased(contestId, to, c.bondWei);
    }

    function _roundSlot(uint8 round, uint8 slot) private pure returns (uint256) {
        return uint256(round) << 8 | slot;
    }

    /// @dev The audit's last round (the appeal, or its decider when the appeal contradicted round
    /// 0: a decider that PASSes agrees with round 0's PASS or the appeal's, never with a FAIL)
    /// decided PASS, `round`'s own majority passed too (two rounds agreeing:
    /// never after an appeal overturned a FAIL, when one captured round would make every honest
    /// dissenter a "liar"), and every cell is a last-layer token cell: one that round opened and
    /// token-checked too.
    function _isContradictedByAppeal(Context memory ctx, uint256 auditId, uint8 round, CellPair[] calldata cells) private view returns (bool) {
        AuditView memory a = jobs.getAudit(auditId);
        if (a.round <= round || (a.phase != Phase.DECIDED && a.phase != Phase.SETTLED) || jobs.currentVerdict(auditId) != AuditCodes.PASS
            || _majorityOf(auditId, round) != AuditCodes.PASS) {
            return false;
        }
        uint16 lastLayer = ctx.model.committedLayers[ctx.model.committedLayers.length - 1];
        for (uint256 i = 0; i < cells.length; i++) {
            Fingerprint.Leaf memory w = Fingerprint.decodeLeaf(cells[i].workerLeaf, ctx.model.fingerprintDims);
            if (w.layer != lastLayer || w.position < ctx.firstOutput || w.position >= ctx.firstOutput + ctx.outputTokens) return false;
        }
        return true;
    }

    /// @dev Each cell's worker leaf is the one at its index in the worker's posted opening.
    function _checkPosted(uint256 auditId, uint8 round, CellPair[] calldata cells, PostedOpening calldata posted) private view {
        PartyView memory worker = jobs.getParty(auditId, round, 0);
        if (!worker.opened || keccak256(posted.leaves) != worker.openingHash) revert OpeningMismatch();
        if (posted.leafIndices.length != cells.length) revert BadCells("one worker leaf index per cell");
        uint256 length = Fingerprint.leafLength(registry.getModelConfig(jobs.getAudit(auditId).modelId).fingerprintDims);
        for (uint256 i = 0; i < cells.length; i++) {
            uint256 start = uint256(posted.leafIndices[i]) * length;
            if (start + length > posted.leaves.length || keccak256(posted.leaves[start:start + length]) != keccak256(cells[i].workerLeaf)) {
                revert LeafMismatch(i);
            }
        }
    }

    function _compare(Context memory ctx, PartyView memory worker, PartyView memory member, CellPair[] calldata cells)
        private
        pure
        returns (bool agrees)
    {
        uint256 layers = ctx.model.committedLayers.length;
        uint256[] memory layerSumSq = new uint256[](layers);
        uint256[] memory layerCells = new uint256[](layers);
        agrees = true;
        uint256 previousKey;
        for (uint256 i = 0; i < cells.length; i++) {
            (Fingerprint.Leaf memory w, Fingerprint.Leaf memory m, uint256 slot) = _provenPair(ctx, worker, member, cells[i], i);
            uint256 key = (uint256(w.position) << 16) | w.layer;
            if (i > 0 && key <= previousKey) revert BadCells("cells must be sorted by (position, layer) without repeats");
            previousKey = key;
            uint256 sumSq = Fingerprint.squaredError(w, m);
            if (!Fingerprint.isCellWithin(sumSq, ctx.model.fingerprintDims, ctx.model.maxCellErrorPpb[slot])) agrees = false;
            if (!_isTokenAccepted(ctx, m, slot == layers - 1)) agrees = false;
            layerSumSq[slot] = sumSq == type(uint256).max || layerSumSq[slot] == type(uint256).max ? type(uint256).max : layerSumSq[slot] + sumSq;
            layerCells[slot] += 1;
        }
        if (cells.length == _workerCellCount(ctx)) agrees = agrees && _isRmsWithin(ctx, layerSumSq, layerCells);
    }

    function _provenPair(Context memory ctx, PartyView memory worker, PartyView memory member, CellPair calldata cell, uint256 i)
        private
        pure
        returns (Fingerprint.Leaf memory w, Fingerprint.Leaf memory m, uint256 slot)
    {
        uint8 dims = ctx.model.fingerprintDims;
        w = Fingerprint.decodeLeaf(cell.workerLeaf, dims);
        m = Fingerprint.decodeLeaf(cell.memberLeaf, dims);
        if (w.position != m.position || w.layer != m.layer) revert LeafMismatch(i);
        if (!_isChallenged(ctx, w.position, w.layer, worker.numPositions)) revert NotChallenged(w.position, w.layer);
        slot = _layerSlot(ctx.model, w.layer);
        if (!_isUnderRoot(cell.workerLeaf, w, ctx.model, worker.root, worker.numPositions, cell.workerSiblings)) revert InvalidMerkleProof(i);
        if (!_isUnderRoot(cell.memberLeaf, m, ctx.model, member.root, member.numPositions, cell.memberSiblings)) revert InvalidMerkleProof(i);
    }

    /// @dev The token check: at a last-layer cell that predicts an output token (positions
    /// P − 1 … P + N − 2), the member's leaf must carry FLAG_NEXT_WITHIN_MARGIN.
    function _isTokenAccepted(Context memory ctx, Fingerprint.Leaf memory m, bool lastLayer) private pure returns (bool) {
        if (!lastLayer || m.position < ctx.firstOutput || m.position >= ctx.firstOutput + ctx.outputTokens) return true;
        return m.flags & Fingerprint.FLAG_NEXT_WITHIN_MARGIN != 0;
    }

    function _isRmsWithin(Context memory ctx, uint256[] memory sumSq, uint256[] memory cells) private pure returns (bool) {
        for (uint256 s = 0; s < sumSq.length; s++) {
            if (cells[s] < ctx.model.minCellsForRms) continue;
            if (!Fingerprint.isLayerRmsWithin(sumSq[s], cells[s], ctx.model.fingerprintDims, ctx.model.rmsErrorPpb[s])) return false;
        }
        return true;
    }

    // --- the challenge, recomputed on-chain ------------------------------------------------

    function _context(uint256 auditId, uint8 round) private view returns (Context memory ctx) {
        AuditView memory a = jobs.getAudit(auditId);
        (,,,, bytes32 seed,,) = jobs.getRound(auditId, round); // the 5th field: challengeSeed (named in Jobs.getRound)
        if (seed == bytes32(0)) revert BadCells("no challenge drawn for this round");
        ctx.numPositions = a.numPositions;
        ctx.outputTokens = a.outputTokens;
        ctx.firstOutput = a.numPositions - a.outputTokens;
        ctx.challengeSeed = seed;
        ctx.model = registry.getModelConfig(a.modelId);
        ctx.positions = computeChallengePositions(seed, ctx.firstOutput + 1, a.outputTokens, challengePositions);
    }

    /// @notice verillm.spec.challenge.compute_challenge_positions: draw j is
    /// P − 1 + keccak256(0x10 ‖ seed ‖ u32 j) mod N, skipping repeats (all N when N ≤ count).
    function computeChallengePositions(bytes32 seed, uint256 promptLen, uint256 outputLen, uint256 count)
        public
        pure
        returns (uint256[] memory positions)
    {
        uint256 first = promptLen - 1;
        if (outputLen <= count) {
            positions = new uint256[](outputLen);
            for (uint256 i = 0; i < outputLen; i++) {
                positions[i] = first + i;
            }
            return positions;
        }
        positions = new uint256[](count);
        uint256 drawn;
        for (uint32 j = 0; drawn < count; j++) {
            uint256 p = first + uint256(keccak256(abi.encodePacked(Domains.CHALLENGE, seed, j))) % outputLen;
            if (!_contains(positions, drawn, p)) positions[drawn++] = p;
        }
    }

    function _isChallenged(Context memory ctx, uint256 position, uint16 layer, uint256 partyPositions) private pure returns (bool) {
        if (position >= partyPositions) return false;
        uint16[] memory layers = ctx.model.committedLayers;
        bool known;
        for (uint256 i = 0; i < layers.length; i++) {
            if (layers[i] == layer) known = true;
        }
        if (!known) return false;
        bool tokenCell = layer == layers[layers.length - 1] && position >= ctx.firstOutput && position <= ctx.firstOutput + ctx.outputTokens;
        return tokenCell || _contains(ctx.positions, ctx.positions.length, position);
    }

    function _workerCellCount(Context memory ctx) private pure returns (uint256) {
        return ctx.positions.length * (ctx.model.committedLayers.length - 1) + ctx.outputTokens;
    }

    // --- helpers -----------------------------------------------------------------------------

    function _isUnderRoot(
        bytes memory leaf,
        Fingerprint.Leaf memory decoded,
        Registry.ModelConfig memory model,
        bytes32 root,
        uint256 numPositions,
        bytes32[] calldata siblings
    ) private pure returns (bool) {
        uint256 layers = model.committedLayers.length;
        uint256 index = uint256(decoded.position) * layers + _layerSlot(model, decoded.layer);
        return MerkleLib.isValidProof(MerkleLib.leafHash(leaf), index, numPositions * layers, siblings, root);
    }

    function _layerSlot(Registry.ModelConfig memory model, uint16 layer) private pure returns (uint256) {
        for (uint256 i = 0; i < model.committedLayers.length; i++) {
            if (model.committedLayers[i] == layer) return i;
        }
        revert NotChallenged(0, layer);
    }

    /// @dev Contests and adjudications of a round: while it is OPENING, or DECIDED by its
    /// dispute deadline (Jobs.getDeadlines), whether or not an escalation runs after it; and a
    /// first round's, while the appeal round that may contradict it is OPENING or DECIDED by its own.
    function _checkDisputeWindow(uint256 auditId, uint8 round) private view {
        (bool open, uint256 disputeBy) = _disputeWindow(auditId, round);
        if (!open) revert WindowClosed(disputeBy);
    }

    function _disputeWindow(uint256 auditId, uint8 round) private view returns (bool open, uint256 disputeBy) {
        (Phase phase, Deadlines memory d) = jobs.getDeadlines(auditId, round);
        if (_isDisputable(phase, d)) return (true, d.disputeBy);
        uint8 current = jobs.getAudit(auditId).round;
        if (current > round) {
            (phase, d) = jobs.getDeadlines(auditId, current);
            if (_isDisputable(phase, d)) return (true, d.disputeBy);
        }
        return (false, d.disputeBy);
    }

    function _isDisputable(Phase phase, Deadlines memory d) private view returns (bool) {
        return (phase == Phase.OPENING || phase == Phase.DECIDED) && (d.disputeBy == 0 || block.number <= d.disputeBy);
    }

    function _openContest(uint256 contestId) private view returns (Contest storage c) {
        if (contestId >= contests.length) revert UnknownContest(contestId);
        c = contests[contestId];
        if (!c.open) revert ContestClosed(contestId);
    }

    function _contains(uint256[] memory values, uint256 length, uint256 value) private pure returns (bool) {
        for (uint256 i = 0; i < length; i++) {
            if (values[i] == value) return true;
        }
        return false;
    }

    /// @notice MerkleLib and Fingerprint as the contract runs them, for the shared test vectors.
    function isValidMerkleProof(bytes32 leaf, uint256 index, uint256 leafCount, bytes32[] calldata siblings, bytes32 root)
        external
        pure
        returns (bool)
    {
        return MerkleLib.isValidProof(leaf, index, leafCount, siblings, root);
    }

    function decodeFingerprintPpb(uint32 bits) external pure returns (int256 valuePpb, bool finite) {
        return Fingerprint.toPpb(bits);
    }

    function getContest(uint256 contestId) external view returns (Contest memory) {
        if (contestId >= contests.length) revert UnknownContest(contestId);
        return contests[contestId];
    }

    function contestCount() external view returns (uint256) {
        return contests.length;
    }
}
