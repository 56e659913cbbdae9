// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title ProtocolState
/// @notice The on-chain state of one or more data markets: epochs, days, the
/// slot registry, full nodes, validators, and the batch flow that finalizes
/// each epoch's snapshot CIDs (docs/protocol.md §1, §12, §13).
/// @dev Roles: the owner grants releasers (who release epochs) and
/// registrars (who manage slots); validators are set per data market by the
/// owner. The deployer starts as owner, releaser and registrar.
contract ProtocolState {
    event EpochReleased(
        address indexed dataMarketAddress, uint256 indexed epochId, uint256 begin, uint256 end, uint256 timestamp
    );
    event DayStartedEvent(address indexed dataMarketAddress, uint256 dayId, uint256 timestamp);
    /// Declared for readers that filter on it; this contract never emits it.
    event DailyTaskCompletedEvent(
        address indexed dataMarketAddress, address snapshotterAddress, uint256 slotId, uint256 dayId, uint256 timestamp
    );
    /// Emitted whenever a slot's snapshotter changes: on registration, on
    /// reassignment, and with the zero address on removal.
    event SlotRegistered(uint256 indexed slotId, address indexed snapshotter);
    event SlotReassigned(uint256 indexed slotId, address indexed previousSnapshotter, address indexed snapshotter);
    event SlotRemoved(uint256 indexed slotId, address indexed snapshotter);
    /// A snapshotter enabled or disabled for all its slots (also when a
    /// registration or reassignment enables it).
    event SnapshotterEnabled(address indexed snapshotter, bool enabled);
    event FullNodeUpdated(address indexed dataMarketAddress, uint256 indexed slotId, bool full);
    event ValidatorsUpdated(address indexed dataMarketAddress, address validatorAddress, bool allowed);
    event SnapshotBatchSubmitted(
        address indexed dataMarketAddress, string batchCid, uint256 indexed epochId, uint256 timestamp
    );
    event SnapshotBatchAttestationSubmitted(
        address indexed dataMarketAddress,
        string batchCid,
        uint256 indexed epochId,
        uint256 timestamp,
        address indexed validatorAddr
    );
    event SnapshotBatchFinalized(
        address indexed dataMarketAddress, uint256 indexed epochId, string indexed batchCid, uint256 timestamp
    );
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);
    event ReleaserUpdated(address indexed account, bool allowed);
    event RegistrarUpdated(address indexed account, bool allowed);
    event EpochsPerDayUpdated(address indexed dataMarketAddress, uint256 epochsPerDay);
    /// A part of a finalized epoch's (project id, CID) pairs stored:
    /// `added` new ones, `stored` in all for the epoch.
    event FinalizedCidsStored(address indexed dataMarketAddress, uint256 indexed epochId, uint256 added, uint256 stored);

    enum SnapshotStatus {
        PENDING,
        FINALIZED
    }

    /// One epoch's batch, as its submitter put it on chain: the root of its
    /// (project id, CID) pairs. The pairs themselves are stored once the
    /// root is finalized, part by part, each part proved against it.
    struct Batch {
        string batchCid;
        bytes32 root;
        address submitter;
        bool finalized;
        uint64 finalizedAt;
        /// Pairs stored so far (`storeFinalizedCids`).
        uint64 stored;
    }

    /// The `updateAddresses` role for validators (the only role kept).
    uint8 public constant ROLE_VALIDATOR = 0;

    /// The most pairs one `storeFinalizedCids` call may carry.
    uint256 public constant MAX_BATCH_PROJECTS = 2000;
    /// The longest batch CID, project id or snapshot CID taken, in bytes.
    uint256 public constant MAX_STRING_BYTES = 256;

    address public owner;
    mapping(address => bool) public isReleaser;
    mapping(address => bool) public isRegistrar;

    // Epochs and days, per data market.
    mapping(address => uint256) public currentEpochId;
    mapping(address => uint256) public currentDayId;
    /// The `end` of the market's last release (0: none yet).
    mapping(address => uint256) public lastReleasedEnd;
    /// Epochs per day (0: no schedule; days are started by hand).
    mapping(address => uint256) public epochsPerDay;
    /// Where the schedule's count starts: epoch `dayBase.epoch` begins day
    /// `dayBase.day`, and each `epochsPerDay` epochs after it the next one.
    /// A new schedule moves it to where the current day ends, so changing
    /// the length neither skips nor stalls a day.
    /// (One storage slot: a release reads both at once.)
    struct DayBase {
        uint128 epoch;
        uint128 day;
    }
    mapping(address => DayBase) public dayBase;

    // Slots. Registered slots are always 1..slotCount.
    uint256 private slotCount;
    mapping(uint256 => address) public slotSnapshotterMapping;
    mapping(address => bool) public allSnapshotters;

    // Full nodes: per market, a flag, a list and each slot's place in it
    // (1-based); per slot, the markets it is marked in and their places.
    mapping(address => mapping(uint256 => bool)) public isFullNode;
    mapping(address => uint256[]) private fullNodeList;
    mapping(address => mapping(uint256 => uint256)) private fullNodeIndex;
    mapping(uint256 => address[]) private fullNodeMarkets;
    mapping(uint256 => mapping(address => uint256)) private fullNodeMarketIndex;

    // Validators and batches, per data market.
    mapping(address => address[]) private validatorList;
    mapping(address => mapping(address => bool)) public isValidator;
    mapping(address => mapping(uint256 => Batch)) private batches;
    /// The root each validator attested for an epoch (zero: none yet).
    mapping(address => mapping(uint256 => mapping(address => bytes32))) public attestedRoot;
    /// Per epoch and root, how many validators attested it, current or not.
    mapping(address => mapping(uint256 => mapping(bytes32 => uint256))) public attestationsForRoot;
    /// Per epoch, every validator that attested, in order.
    mapping(address => mapping(uint256 => address[])) private attesters;
    /// Per finalized epoch, the validators whose root was not the finalized one.
    mapping(address => mapping(uint256 => address[])) private divergent;
    /// Per epoch, the batch CIDs submitted for it.
    mapping(address => mapping(uint256 => mapping(bytes32 => bool))) private batchCidOfEpoch;
    /// Per project and epoch, the finalized CID (empty: none stored).
    mapping(address => mapping(string => mapping(uint256 => string))) private finalizedCids;
    mapping(address => mapping(string => uint256)) public lastFinalizedSnapshot;

    constructor() {
        owner = msg.sender;
        emit OwnershipTransferred(address(0), msg.sender);
        isReleaser[msg.sender] = true;
        emit ReleaserUpdated(msg.sender, true);
        isRegistrar[msg.sender] = true;
        emit RegistrarUpdated(msg.sender, true);
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "not owner");
        _;
    }

    modifier onlyReleaser() {
        require(isReleaser[msg.sender], "not a releaser");
        _;
    }

    modifier onlyReleaserOrOwner() {
        require(isReleaser[msg.sender] || msg.sender == owner, "not a releaser or owner");
        _;
    }

    modifier onlyRegistrarOrOwner() {
        require(isRegistrar[msg.sender] || msg.sender == owner, "not a registrar or owner");
        _;
    }

    modifier onlyValidator(address dataMarketAddress) {
        require(isValidator[dataMarketAddress][msg.sender], "not a validator of this data market");
        _;
    }

    // ---- Roles ----

    /// Hands the contract to `newOwner`. Roles held by the old owner stay.
    function transferOwnership(address newOwner) external onlyOwner {
        require(newOwner != address(0), "zero address");
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    /// Grants (`true`) or revokes the right to release epochs.
    function setReleaser(address account, bool allowed) external onlyOwner {
        require(account != address(0), "zero address");
        isReleaser[account] = allowed;
        emit ReleaserUpdated(account, allowed);
    }

    /// Grants (`true`) or revokes the right to manage slots and full nodes.
    function setRegistrar(address account, bool allowed) external onlyOwner {
        require(account != address(0), "zero address");
        isRegistrar[account] = allowed;
        emit RegistrarUpdated(account, allowed);
    }

    // ---- Slots ----

    /// The number of registered slots; they are slots 1 to this number.
    function getTotalNodeCount() public view virtual returns (uint256) {
        return slotCount;
    }

    /// Registers the next slot (`slotId` must be the count + 1) to
    /// `snapshotter` and enables that snapshotter.
    function registerSlot(uint256 slotId, address snapshotter) external onlyRegistrarOrOwner {
        require(slotId > 0, "slot ids start at 1");
        require(snapshotter != address(0), "zero address");
        require(slotSnapshotterMapping[slotId] == address(0), "slot taken");
        require(slotId == slotCount + 1, "slots register in order: slot id must be count + 1");
        slotCount = slotId;
        slotSnapshotterMapping[slotId] = snapshotter;
        enable(snapshotter, true);
        emit SlotRegistered(slotId, snapshotter);
    }

    /// Gives a registered slot to another snapshotter and enables it. The
    /// previous snapshotter stays enabled (it may hold other slots).
    function reassignSlot(uint256 slotId, address snapshotter) external onlyRegistrarOrOwner {
        address previous = slotSnapshotterMapping[slotId];
        require(previous != address(0), "slot not registered");
        require(snapshotter != address(0), "zero address");
        slotSnapshotterMapping[slotId] = snapshotter;
        enable(snapshotter, true);
        emit SlotReassigned(slotId, previous, snapshotter);
        emit SlotRegistered(slotId, snapshotter);
    }

    /// Removes the last registered slot and its full-node marks in every
    /// market. A slot in the middle is reassigned instead, so that the
    /// registered slots stay 1..count.
    function removeSlot(uint256 slotId) external onlyRegistrarOrOwner {
        address previous = slotSnapshotterMapping[slotId];
        require(previous != address(0), "slot not registered");
        require(slotId == slotCount, "only the last slot can be removed");
        address[] storage markets = fullNodeMarkets[slotId];
        while (markets.length > 0) {
            unmarkFullNode(markets[markets.length - 1], slotId);
        }
        delete slotSnapshotterMapping[slotId];
        slotCount = slotId - 1;
        emit SlotRemoved(slotId, previous);
        emit SlotRegistered(slotId, address(0));
    }

    /// Enables or disables a snapshotter address for all its slots: the
    /// validators refuse a disabled snapshotter's submissions for every
    /// epoch released while it is disabled.
    function setSnapshotterEnabled(address snapshotter, bool enabled) external onlyRegistrarOrOwner {
        enable(snapshotter, enabled);
    }

    function enable(address snapshotter, bool enabled) private {
        if (allSnapshotters[snapshotter] == enabled) return;
        allSnapshotters[snapshotter] = enabled;
        emit SnapshotterEnabled(snapshotter, enabled);
    }

    /// Marks (`true`) or unmarks a registered slot as a full node of a data
    /// market: its submissions are accepted for every active pool.
    function setFullNode(address dataMarketAddress, uint256 slotId, bool full) external onlyRegistrarOrOwner {
        require(slotSnapshotterMapping[slotId] != address(0), "slot not registered");
        if (full == isFullNode[dataMarketAddress][slotId]) return;
        if (full) {
            isFullNode[dataMarketAddress][slotId] = true;
            fullNodeList[dataMarketAddress].push(slotId);
            fullNodeIndex[dataMarketAddress][slotId] = fullNodeList[dataMarketAddress].length;
            fullNodeMarkets[slotId].push(dataMarketAddress);
            fullNodeMarketIndex[slotId][dataMarketAddress] = fullNodeMarkets[slotId].length;
            emit FullNodeUpdated(dataMarketAddress, slotId, true);
        } else {
            unmarkFullNode(dataMarketAddress, slotId);
        }
    }

    /// The data market's full-node slots (in no particular order).
    function getFullNodes(address dataMarketAddress) external view returns (uint256[] memory) {
        return fullNodeList[dataMarketAddress];
    }

    function unmarkFullNode(address dataMarketAddress, uint256 slotId) private {
        isFullNode[dataMarketAddress][slotId] = false;
        uint256[] storage list = fullNodeList[dataMarketAddress];
        uint256 i = fullNodeIndex[dataMarketAddress][slotId] - 1;
        uint256 lastSlot = list[list.length - 1];
        list[i] = lastSlot;
        fullNodeIndex[dataMarketAddress][lastSlot] = i + 1;
        list.pop();
        delete fullNodeIndex[dataMarketAddress][slotId];

        address[] storage markets = fullNodeMarkets[slotId];
        uint256 j = fullNodeMarketIndex[slotId][dataMarketAddress] - 1;
        address lastMarket = markets[markets.length - 1];
        markets[j] = lastMarket;
        fullNodeMarketIndex[slotId][lastMarket] = j + 1;
        markets.pop();
        delete fullNodeMarketIndex[slotId][dataMarketAddress];

        emit FullNodeUpdated(dataMarketAddress, slotId, false);
    }

    // ---- Epochs and days ----

    /// Releases the market's next epoch over source blocks `begin..=end`.
    /// The first release may start at any block from 1; each later one
    /// starts right after the previous end. Starts a new day when the
    /// market's schedule says so (its DayStartedEvent comes first).
    function releaseEpoch(address dataMarketAddress, uint256 begin, uint256 end)
        external
        onlyReleaser
        returns (uint256 epochId)
    {
        require(end >= begin, "end must not be before begin");
        uint256 last = lastReleasedEnd[dataMarketAddress];
        if (last == 0) {
            require(begin >= 1, "begin must be at least 1");
        } else {
            require(begin == last + 1, "begin must be last end + 1");
        }
        lastReleasedEnd[dataMarketAddress] = end;
        epochId = ++currentEpochId[dataMarketAddress];
        uint256 n = epochsPerDay[dataMarketAddress];
        DayBase memory base = n > 0 ? dayBase[dataMarketAddress] : DayBase(0, 0);
        if (n > 0 && epochId >= base.epoch) {
            uint256 day = base.day + (epochId - base.epoch) / n;
            if (day > currentDayId[dataMarketAddress]) {
                currentDayId[dataMarketAddress] = day;
                emit DayStartedEvent(dataMarketAddress, day, block.timestamp);
            }
        }
        emit EpochReleased(dataMarketAddress, epochId, begin, end, block.timestamp);
    }

    /// Sets the market's day length in epochs, from the next day on: the
    /// current day keeps the length it started with (a market without a
    /// schedule: the next release starts the next day), then each day is
    /// `n` epochs; the release that enters a new day starts it. Days are
    /// never skipped or held back by a change of length.
    function setEpochsPerDay(address dataMarketAddress, uint256 n) external onlyOwner {
        require(n >= 1, "epochs per day must be at least 1");
        uint256 old = epochsPerDay[dataMarketAddress];
        if (n == old) return;
        uint256 day = currentDayId[dataMarketAddress];
        DayBase memory base = dayBase[dataMarketAddress];
        if (old == 0) {
            // No schedule yet: the next release starts the next day.
            dayBase[dataMarketAddress] =
                DayBase(uint128(currentEpochId[dataMarketAddress] + 1), uint128(day + 1));
        } else if (day >= base.day) {
            // The current day began at `start` under the old length; the
            // next one begins where it ends.
            uint256 start = base.epoch + (day - base.day) * old;
            dayBase[dataMarketAddress] = DayBase(uint128(start + old), uint128(day + 1));
        }
        // Otherwise a change not yet begun is replaced: same start, new length.
        epochsPerDay[dataMarketAddress] = n;
        emit EpochsPerDayUpdated(dataMarketAddress, n);
    }

    /// Starts the next day of a market that has no day schedule.
    function startDay(address dataMarketAddress) external onlyReleaserOrOwner returns (uint256 dayId) {
        require(epochsPerDay[dataMarketAddress] == 0, "this market's days follow its schedule");
        dayId = ++currentDayId[dataMarketAddress];
        emit DayStartedEvent(dataMarketAddress, dayId, block.timestamp);
    }

    // ---- Validators ----

    /// Adds (`true`) or removes (`false`) validators of a data market.
    function updateAddresses(address dataMarketAddress, uint8 role, address[] calldata addrs, bool[] calldata allowed)
        external
        onlyOwner
    {
        require(role == ROLE_VALIDATOR, "only the validator role is kept here");
        require(addrs.length == allowed.length, "addresses and flags differ in length");
        address[] storage list = validatorList[dataMarketAddress];
        for (uint256 i = 0; i < addrs.length; i++) {
            address a = addrs[i];
            if (allowed[i] && !isValidator[dataMarketAddress][a]) {
                isValidator[dataMarketAddress][a] = true;
                list.push(a);
            } else if (!allowed[i] && isValidator[dataMarketAddress][a]) {
                isValidator[dataMarketAddress][a] = false;
                for (uint256 j = 0; j < list.length; j++) {
                    if (list[j] == a) {
                        list[j] = list[list.length - 1];
                        list.pop();
                        break;
                    }
                }
            }
            emit ValidatorsUpdated(dataMarketAddress, a, allowed[i]);
        }
    }

    function getValidators(address dataMarketAddress) external view returns (address[] memory) {
        return validatorList[dataMarketAddress];
    }

    function getTotalValidatorsCount(address dataMarketAddress) public view returns (uint256) {
        return validatorList[dataMarketAddress].length;
    }

    // ---- Batches ----

    /// Puts an epoch's batch on chain: its CID and the root of its
    /// (projectId, CID) Merkle tree, which counts as its submitter's
    /// attestation. One batch per epoch, replaced only once its root can no
    /// longer win; the replacement must carry the root its submitter
    /// attested. Nothing per project is written here: replacing a batch
    /// costs the same whatever its size.
    function submitSubmissionBatch(
        address dataMarketAddress,
        string calldata batchCid,
        uint256 epochId,
        bytes32 finalizedCidsRootHash
    ) external onlyValidator(dataMarketAddress) {
        require(bytes(batchCid).length > 0, "empty batch CID");
        require(bytes(batchCid).length <= MAX_STRING_BYTES, "batch CID too long");
        require(finalizedCidsRootHash != bytes32(0), "empty root");
        require(epochId > 0 && epochId <= currentEpochId[dataMarketAddress], "this epoch was not released");
        Batch storage b = batches[dataMarketAddress][epochId];
        require(!b.finalized, "this epoch is finalized");
        if (b.submitter != address(0)) {
            require(outvoted(dataMarketAddress, epochId), "this epoch already has a batch");
        }
        batchCidOfEpoch[dataMarketAddress][epochId][keccak256(bytes(batchCid))] = true;
        b.batchCid = batchCid;
        b.root = finalizedCidsRootHash;
        b.submitter = msg.sender;
        emit SnapshotBatchSubmitted(dataMarketAddress, batchCid, epochId, block.timestamp);
        bytes32 mine = attestedRoot[dataMarketAddress][epochId][msg.sender];
        if (mine == bytes32(0)) {
            attest(dataMarketAddress, batchCid, epochId, finalizedCidsRootHash);
        } else {
            require(mine == finalizedCidsRootHash, "the batch's root is not the one its submitter attested");
        }
        tryFinalize(dataMarketAddress, epochId);
    }

    /// Stores a part of a finalized epoch's pairs, proved against its root
    /// by an OpenZeppelin multiproof (`proof`, `proofFlags`) of their leaves
    /// in tree order (project ids strictly ascending). Pairs already stored
    /// are skipped, so parts may overlap and anyone may store them: only
    /// pairs of the finalized root can be.
    function storeFinalizedCids(
        address dataMarketAddress,
        uint256 epochId,
        string[] calldata projectIds,
        string[] calldata snapshotCids,
        bytes32[] calldata proof,
        bool[] calldata proofFlags
    ) external {
        Batch storage b = batches[dataMarketAddress][epochId];
        require(b.finalized, "this epoch is not finalized");
        uint256 n = projectIds.length;
        require(n > 0 && n == snapshotCids.length, "project ids and CIDs differ in length");
        require(n <= MAX_BATCH_PROJECTS, "too many projects in one part");
        bytes32[] memory leaves = new bytes32[](n);
        for (uint256 i = 0; i < n; i++) {
            if (i > 0) require(less(bytes(projectIds[i - 1]), bytes(projectIds[i])), "project ids not ascending");
            leaves[i] = keccak256(bytes.concat(keccak256(abi.encode(projectIds[i], snapshotCids[i]))));
        }
        require(multiProofRoot(proof, proofFlags, leaves) == b.root, "the part does not prove against the epoch's root");
        uint256 added = 0;
        for (uint256 i = 0; i < n; i++) {
            if (storePair(dataMarketAddress, epochId, projectIds[i], snapshotCids[i])) added++;
        }
        b.stored += uint64(added);
        emit FinalizedCidsStored(dataMarketAddress, epochId, added, b.stored);
    }

    /// Stores one proved pair unless its project's CID is stored already.
    function storePair(address dataMarketAddress, uint256 epochId, string calldata projectId, string calldata cid)
        private
        returns (bool)
    {
        string storage slot = finalizedCids[dataMarketAddress][projectId][epochId];
        if (bytes(slot).length != 0) return false;
        require(bytes(cid).length > 0, "empty snapshot CID");
        require(
            bytes(projectId).length <= MAX_STRING_BYTES && bytes(cid).length <= MAX_STRING_BYTES,
            "project id or CID too long"
        );
        finalizedCids[dataMarketAddress][projectId][epochId] = cid;
        if (epochId > lastFinalizedSnapshot[dataMarketAddress][projectId]) {
            lastFinalizedSnapshot[dataMarketAddress][projectId] = epochId;
        }
        return true;
    }

    /// The root of an OpenZeppelin multiproof (MerkleProof.processMultiProof
    /// with sorted-pair hashing), with the length checks that make it sound.
    function multiProofRoot(bytes32[] calldata proof, bool[] calldata proofFlags, bytes32[] memory leaves)
        private
        pure
        returns (bytes32)
    {
        uint256 leavesLen = leaves.length;
        uint256 total = proofFlags.length;
        require(leavesLen + proof.length == total + 1, "the multiproof's lengths do not add up");
        bytes32[] memory hashes = new bytes32[](total);
        uint256 leafPos = 0;
        uint256 hashPos = 0;
        uint256 proofPos = 0;
        for (uint256 i = 0; i < total; i++) {
            bytes32 a = leafPos < leavesLen ? leaves[leafPos++] : hashes[hashPos++];
            bytes32 c;
            if (proofFlags[i]) {
                c = leafPos < leavesLen ? leaves[leafPos++] : hashes[hashPos++];
            } else {
                require(proofPos < proof.length, "the multiproof is short");
                c = proof[proofPos++];
            }
            hashes[i] = pairHash(a, c);
        }
        if (total > 0) {
            require(proofPos == proof.length, "the multiproof is not used whole");
            return hashes[total - 1];
        }
        return leavesLen > 0 ? leaves[0] : proof[0];
    }

    /// A validator's own root for the epoch's batch, once per epoch. The
    /// epoch is finalized when more than half of the current validators
    /// attested the batch's root; whoever attested another root is recorded
    /// as divergent.
    function submitBatchAttestation(
        address dataMarketAddress,
        string calldata batchCid,
        uint256 epochId,
        bytes32 finalizedCidsRootHash
    ) external onlyValidator(dataMarketAddress) {
        Batch storage b = batches[dataMarketAddress][epochId];
        require(b.submitter != address(0), "no batch for this epoch");
        require(batchCidOfEpoch[dataMarketAddress][epochId][keccak256(bytes(batchCid))], "not a batch of this epoch");
        require(finalizedCidsRootHash != bytes32(0), "empty root");
        require(attestedRoot[dataMarketAddress][epochId][msg.sender] == bytes32(0), "already attested");
        attest(dataMarketAddress, batchCid, epochId, finalizedCidsRootHash);
        if (b.finalized && finalizedCidsRootHash != b.root) {
            divergent[dataMarketAddress][epochId].push(msg.sender);
        }
        tryFinalize(dataMarketAddress, epochId);
    }

    /// Finalizes the epoch if its batch's root has a majority of the current
    /// validators now; anyone may call it.
    function finalize(address dataMarketAddress, uint256 epochId) external {
        tryFinalize(dataMarketAddress, epochId);
    }

    /// The Merkle root of `(projectIds[i], cids[i])` (OpenZeppelin's standard
    /// tree, leaves in project-id order); project ids must be strictly
    /// ascending in byte order.
    function merkleRoot(string[] calldata projectIds, string[] calldata cids) public pure returns (bytes32) {
        uint256 n = projectIds.length;
        if (n == 0) return keccak256("");
        bytes32[] memory tree = new bytes32[](2 * n - 1);
        for (uint256 i = 0; i < n; i++) {
            if (i > 0) require(less(bytes(projectIds[i - 1]), bytes(projectIds[i])), "project ids not ascending");
            tree[tree.length - 1 - i] = keccak256(bytes.concat(keccak256(abi.encode(projectIds[i], cids[i]))));
        }
        for (uint256 j = n - 1; j > 0; j--) {
            tree[j - 1] = pairHash(tree[2 * j - 1], tree[2 * j]);
        }
        return tree[0];
    }

    function pairHash(bytes32 a, bytes32 b) private pure returns (bytes32) {
        return a < b ? keccak256(abi.encodePacked(a, b)) : keccak256(abi.encodePacked(b, a));
    }

    /// Byte-order `a < b`.
    function less(bytes memory a, bytes memory b) private pure returns (bool) {
        uint256 n = a.length < b.length ? a.length : b.length;
        for (uint256 i = 0; i < n; i++) {
            if (a[i] != b[i]) return a[i] < b[i];
        }
        return a.length < b.length;
    }

    function attest(address dataMarketAddress, string calldata batchCid, uint256 epochId, bytes32 root) private {
        attestedRoot[dataMarketAddress][epochId][msg.sender] = root;
        attestationsForRoot[dataMarketAddress][epochId][root] += 1;
        attesters[dataMarketAddress][epochId].push(msg.sender);
        emit SnapshotBatchAttestationSubmitted(dataMarketAddress, batchCid, epochId, block.timestamp, msg.sender);
    }

    /// The epoch's attestations from current validators: those for the
    /// batch's root and those for any other root.
    function currentVotes(address dataMarketAddress, uint256 epochId)
        public
        view
        returns (uint256 forRoot, uint256 against)
    {
        bytes32 root = batches[dataMarketAddress][epochId].root;
        address[] storage all = attesters[dataMarketAddress][epochId];
        for (uint256 i = 0; i < all.length; i++) {
            if (!isValidator[dataMarketAddress][all[i]]) continue;
            if (attestedRoot[dataMarketAddress][epochId][all[i]] == root) {
                forRoot++;
            } else {
                against++;
            }
        }
    }

    /// Whether the epoch's batch root can no longer win: the current
    /// validators that attested other roots are at least half of all
    /// current validators.
    function outvoted(address dataMarketAddress, uint256 epochId) public view returns (bool) {
        Batch storage b = batches[dataMarketAddress][epochId];
        if (b.submitter == address(0)) return false;
        uint256 total = getTotalValidatorsCount(dataMarketAddress);
        // Counting every attester gives an upper bound: skip the loop when
        // even that is too few.
        uint256 allOthers =
            attesters[dataMarketAddress][epochId].length - attestationsForRoot[dataMarketAddress][epochId][b.root];
        if (allOthers * 2 < total) return false;
        (, uint256 against) = currentVotes(dataMarketAddress, epochId);
        return against * 2 >= total;
    }

    function tryFinalize(address dataMarketAddress, uint256 epochId) private {
        Batch storage b = batches[dataMarketAddress][epochId];
        if (b.finalized || b.submitter == address(0)) return;
        uint256 total = getTotalValidatorsCount(dataMarketAddress);
        // Upper bound first, as in `outvoted`.
        if (attestationsForRoot[dataMarketAddress][epochId][b.root] * 2 <= total) return;
        (uint256 forRoot,) = currentVotes(dataMarketAddress, epochId);
        if (forRoot * 2 <= total) return;
        b.finalized = true;
        b.finalizedAt = uint64(block.timestamp);
        address[] storage all = attesters[dataMarketAddress][epochId];
        for (uint256 i = 0; i < all.length; i++) {
            if (attestedRoot[dataMarketAddress][epochId][all[i]] != b.root) {
                divergent[dataMarketAddress][epochId].push(all[i]);
            }
        }
        emit SnapshotBatchFinalized(dataMarketAddress, epochId, b.batchCid, block.timestamp);
    }

    // ---- Views ----

    /// A project's finalized CID for an epoch and its status: `("", PENDING)`
    /// until a finalized batch's part naming it is stored.
    function maxSnapshotsCid(address dataMarketAddress, string calldata projectId, uint256 epochId)
        external
        view
        returns (string memory, SnapshotStatus)
    {
        string storage cid = finalizedCids[dataMarketAddress][projectId][epochId];
        return (cid, bytes(cid).length > 0 ? SnapshotStatus.FINALIZED : SnapshotStatus.PENDING);
    }

    /// As `maxSnapshotsCid`, with the time its epoch was finalized.
    function snapshotStatus(address dataMarketAddress, string calldata projectId, uint256 epochId)
        external
        view
        returns (SnapshotStatus status, string memory snapshotCid, uint256 timestamp)
    {
        string storage cid = finalizedCids[dataMarketAddress][projectId][epochId];
        if (bytes(cid).length == 0) return (SnapshotStatus.PENDING, "", 0);
        return (SnapshotStatus.FINALIZED, cid, batches[dataMarketAddress][epochId].finalizedAt);
    }

    /// How many of a finalized epoch's pairs are stored.
    function storedCids(address dataMarketAddress, uint256 epochId) external view returns (uint256) {
        return batches[dataMarketAddress][epochId].stored;
    }

    /// How many of `projectIds` have no CID stored for the epoch.
    function unstoredCids(address dataMarketAddress, uint256 epochId, string[] calldata projectIds)
        external
        view
        returns (uint256 n)
    {
        for (uint256 i = 0; i < projectIds.length; i++) {
            if (bytes(finalizedCids[dataMarketAddress][projectIds[i]][epochId]).length == 0) n++;
        }
    }

    /// An epoch's batch: its CID, root, submitter and whether it is final.
    function epochBatch(address dataMarketAddress, uint256 epochId)
        external
        view
        returns (string memory batchCid, bytes32 root, address submitter, bool finalized)
    {
        Batch storage b = batches[dataMarketAddress][epochId];
        return (b.batchCid, b.root, b.submitter, b.finalized);
    }

    /// Whether `proof` shows that `projectId`'s finalized CID in the epoch is
    /// `cid`, against the root the epoch was finalized with.
    function verifyFinalizedCid(
        address dataMarketAddress,
        uint256 epochId,
        string calldata projectId,
        string calldata cid,
        bytes32[] calldata proof
    ) external view returns (bool) {
        Batch storage b = batches[dataMarketAddress][epochId];
        if (!b.finalized) return false;
        bytes32 h = keccak256(bytes.concat(keccak256(abi.encode(projectId, cid))));
        for (uint256 i = 0; i < proof.length; i++) {
            h = pairHash(h, proof[i]);
        }
        return h == b.root;
    }

    /// How many validators attested the epoch, whatever their root, current
    /// or not.
    function attestationsCount(address dataMarketAddress, uint256 epochId) external view returns (uint256) {
        return attesters[dataMarketAddress][epochId].length;
    }

    /// The validators of a finalized epoch whose root was not the finalized one.
    function divergentValidators(address dataMarketAddress, uint256 epochId) external view returns (address[] memory) {
        return divergent[dataMarketAddress][epochId];
    }
}
