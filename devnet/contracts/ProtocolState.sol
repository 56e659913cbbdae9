// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// ProtocolState for the local network: the part of Powerloom's protocol
/// state a lite node reads (epochs, days, the slot registry, the node count),
/// with owner-only setters so tests and the devnet can drive it; and the
/// Protocol V2 batch flow validators use (docs/protocol.md §12): a registry of
/// validators per data market, one batch per epoch, attestations, and
/// finalization once more than half of the registered validators attest the
/// batch's root.
contract ProtocolState {
    event EpochReleased(
        address indexed dataMarketAddress, uint256 indexed epochId, uint256 begin, uint256 end, uint256 timestamp
    );
    event DayStartedEvent(address indexed dataMarketAddress, uint256 dayId, uint256 timestamp);
    event DailyTaskCompletedEvent(
        address indexed dataMarketAddress, address snapshotterAddress, uint256 slotId, uint256 dayId, uint256 timestamp
    );
    event SlotRegistered(uint256 indexed slotId, address indexed snapshotter);
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

    enum SnapshotStatus {
        PENDING,
        FINALIZED
    }

    struct ConsensusStatus {
        SnapshotStatus status;
        string snapshotCid;
        uint256 timestamp;
    }

    /// One epoch's batch, as its submitter put it on chain.
    struct Batch {
        string batchCid;
        bytes32 root;
        address submitter;
        bool finalized;
        string[] projectIds;
    }

    /// `updateAddresses` roles, as upstream numbers them; only validators
    /// are kept here.
    uint8 public constant ROLE_VALIDATOR = 0;

    /// Projects one batch may name (its submission, its replacement and its
    /// finalization each loop over them).
    uint256 public constant MAX_BATCH_PROJECTS = 2000;

    address public owner;
    uint256 private totalNodeCount;
    mapping(address => uint256) public currentEpochId;
    mapping(address => uint256) public currentDayId;
    mapping(uint256 => address) public slotSnapshotterMapping;
    mapping(address => bool) public allSnapshotters;
    /// Per data market, the slots that run a full node (docs/protocol.md §13).
    mapping(address => mapping(uint256 => bool)) public isFullNode;
    mapping(address => uint256[]) private fullNodeList;

    mapping(address => address[]) private validatorList;
    mapping(address => mapping(address => bool)) public isValidator;
    mapping(address => mapping(uint256 => Batch)) private batches;
    /// The root each validator attested for an epoch (zero: none yet).
    mapping(address => mapping(uint256 => mapping(address => bytes32))) public attestedRoot;
    /// Per epoch and root, how many validators attested it.
    mapping(address => mapping(uint256 => mapping(bytes32 => uint256))) public attestationsForRoot;
    /// Per epoch, every validator that attested, in order.
    mapping(address => mapping(uint256 => address[])) private attesters;
    /// Per finalized epoch, the validators whose root was not the finalized one.
    mapping(address => mapping(uint256 => address[])) private divergent;
    /// Per epoch, the batch CIDs submitted for it. A CID is known per epoch
    /// only: one validator using another epoch's CID blocks nothing.
    mapping(address => mapping(uint256 => mapping(bytes32 => bool))) private batchCidOfEpoch;
    mapping(address => mapping(string => mapping(uint256 => ConsensusStatus))) private statuses;
    mapping(address => mapping(string => uint256)) public lastFinalizedSnapshot;

    constructor(uint256 initialNodeCount) {
        owner = msg.sender;
        totalNodeCount = initialNodeCount;
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "not owner");
        _;
    }

    function getTotalNodeCount() external view returns (uint256) {
        return totalNodeCount;
    }

    function setTotalNodeCount(uint256 n) external onlyOwner {
        totalNodeCount = n;
    }

    /// Maps a slot to its snapshotter (signer) and enables that snapshotter.
    function registerSlot(uint256 slotId, address snapshotter) external onlyOwner {
        require(slotId > 0, "slot ids start at 1");
        slotSnapshotterMapping[slotId] = snapshotter;
        allSnapshotters[snapshotter] = true;
        emit SlotRegistered(slotId, snapshotter);
    }

    /// Marks (`true`) or unmarks a slot as a full node of a data market: its
    /// submissions are accepted for every active pool, selected or not.
    function setFullNode(address dataMarketAddress, uint256 slotId, bool full) external onlyOwner {
        require(slotId > 0, "slot ids start at 1");
        if (full == isFullNode[dataMarketAddress][slotId]) return;
        isFullNode[dataMarketAddress][slotId] = full;
        uint256[] storage list = fullNodeList[dataMarketAddress];
        if (full) {
            list.push(slotId);
        } else {
            for (uint256 i = 0; i < list.length; i++) {
                if (list[i] == slotId) {
                    list[i] = list[list.length - 1];
                    list.pop();
                    break;
                }
            }
        }
        emit FullNodeUpdated(dataMarketAddress, slotId, full);
    }

    /// The data market's full-node slots (in no particular order).
    function getFullNodes(address dataMarketAddress) external view returns (uint256[] memory) {
        return fullNodeList[dataMarketAddress];
    }

    function setSnapshotterEnabled(address snapshotter, bool enabled) external onlyOwner {
        allSnapshotters[snapshotter] = enabled;
    }

    /// Releases the next epoch (ids 1, 2, … per data market).
    function releaseEpoch(address dataMarketAddress, uint256 begin, uint256 end) external onlyOwner returns (uint256 epochId) {
        require(end >= begin, "bad range");
        epochId = ++currentEpochId[dataMarketAddress];
        emit EpochReleased(dataMarketAddress, epochId, begin, end, block.timestamp);
    }

    /// Releases an epoch with an explicit id (gaps, repeats, other markets).
    function releaseEpochWithId(address dataMarketAddress, uint256 epochId, uint256 begin, uint256 end) external onlyOwner {
        currentEpochId[dataMarketAddress] = epochId;
        emit EpochReleased(dataMarketAddress, epochId, begin, end, block.timestamp);
    }

    /// Emits an EpochReleased log whose data is too short to decode, so tests
    /// can check that a node skips it instead of failing.
    function emitMalformedRelease(address dataMarketAddress) external onlyOwner {
        bytes32 signature = EpochReleased.selector;
        bytes32 market = bytes32(uint256(uint160(dataMarketAddress)));
        assembly {
            mstore(0, 7)
            log3(0, 32, signature, market, 99)
        }
    }

    modifier onlyValidator(address dataMarketAddress) {
        require(isValidator[dataMarketAddress][msg.sender], "not a validator of this data market");
        _;
    }

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

    /// Puts an epoch's batch on chain: its CID, each project's CID (pending
    /// until finalized) and the root of its (projectId, CID) Merkle tree. The
    /// batch is its submitter's attestation of that root. One batch per
    /// epoch, replaced only once its root can no longer win (the validators
    /// that attested other roots are at least half of all of them): the
    /// replacement comes from a validator whose own attested root it carries.
    function submitSubmissionBatch(
        address dataMarketAddress,
        string calldata batchCid,
        uint256 epochId,
        string[] calldata projectIds,
        string[] calldata snapshotCids,
        bytes32 finalizedCidsRootHash
    ) external onlyValidator(dataMarketAddress) {
        require(projectIds.length == snapshotCids.length, "project ids and CIDs differ in length");
        require(projectIds.length <= MAX_BATCH_PROJECTS, "too many projects in one batch");
        require(bytes(batchCid).length > 0, "empty batch CID");
        require(epochId > 0 && epochId <= currentEpochId[dataMarketAddress], "this epoch was not released");
        // The pairs are the root's leaves: a batch cannot name CIDs other
        // than the ones its root (what validators attest) commits to.
        require(
            merkleRoot(projectIds, snapshotCids) == finalizedCidsRootHash,
            "the root is not the Merkle root of the batch's pairs (project ids ascending, each once)"
        );
        clearForReplacement(dataMarketAddress, epochId);
        batchCidOfEpoch[dataMarketAddress][epochId][keccak256(bytes(batchCid))] = true;
        storeBatch(dataMarketAddress, batchCid, epochId, projectIds, snapshotCids, finalizedCidsRootHash);
        emit SnapshotBatchSubmitted(dataMarketAddress, batchCid, epochId, block.timestamp);
        bytes32 mine = attestedRoot[dataMarketAddress][epochId][msg.sender];
        if (mine == bytes32(0)) {
            attest(dataMarketAddress, batchCid, epochId, finalizedCidsRootHash);
        } else {
            require(mine == finalizedCidsRootHash, "the batch's root is not the one its submitter attested");
        }
        tryFinalize(dataMarketAddress, epochId);
    }

    /// An epoch not finalized, with no batch or one that lost: its old
    /// batch's CIDs are cleared.
    function clearForReplacement(address dataMarketAddress, uint256 epochId) private {
        Batch storage b = batches[dataMarketAddress][epochId];
        require(!b.finalized, "this epoch is finalized");
        if (b.submitter == address(0)) return;
        require(outvoted(dataMarketAddress, epochId), "this epoch already has a batch");
        for (uint256 i = 0; i < b.projectIds.length; i++) {
            delete statuses[dataMarketAddress][b.projectIds[i]][epochId];
        }
        delete b.projectIds;
    }

    function storeBatch(
        address dataMarketAddress,
        string calldata batchCid,
        uint256 epochId,
        string[] calldata projectIds,
        string[] calldata snapshotCids,
        bytes32 root
    ) private {
        Batch storage b = batches[dataMarketAddress][epochId];
        b.batchCid = batchCid;
        b.root = root;
        b.submitter = msg.sender;
        for (uint256 i = 0; i < projectIds.length; i++) {
            b.projectIds.push(projectIds[i]);
            statuses[dataMarketAddress][projectIds[i]][epochId] =
                ConsensusStatus(SnapshotStatus.PENDING, snapshotCids[i], block.timestamp);
        }
    }

    /// A validator's own root for the epoch's batch, once per epoch. The
    /// epoch is finalized when more than half of the registered validators
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
        // Any batch submitted for the epoch (attestations count per root; a
        // replacement in flight must not make honest attestations revert).
        require(batchCidOfEpoch[dataMarketAddress][epochId][keccak256(bytes(batchCid))], "not a batch of this epoch");
        require(finalizedCidsRootHash != bytes32(0), "empty root");
        require(attestedRoot[dataMarketAddress][epochId][msg.sender] == bytes32(0), "already attested");
        attest(dataMarketAddress, batchCid, epochId, finalizedCidsRootHash);
        if (b.finalized && finalizedCidsRootHash != b.root) {
            divergent[dataMarketAddress][epochId].push(msg.sender);
        }
        tryFinalize(dataMarketAddress, epochId);
    }

    /// Finalizes the epoch if its batch's root has a majority now (after a
    /// change of the validator set, say); anyone may call it.
    function finalize(address dataMarketAddress, uint256 epochId) external {
        tryFinalize(dataMarketAddress, epochId);
    }

    /// The Merkle root of `(projectIds[i], cids[i])` as docs/protocol.md §11
    /// defines it (OpenZeppelin's standard tree, leaves in project-id order);
    /// the project ids must be strictly ascending (byte order).
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

    /// Whether the epoch's batch root can no longer win: the validators that
    /// attested other roots are at least half of all of them.
    function outvoted(address dataMarketAddress, uint256 epochId) public view returns (bool) {
        Batch storage b = batches[dataMarketAddress][epochId];
        if (b.submitter == address(0)) return false;
        uint256 others = attesters[dataMarketAddress][epochId].length - attestationsForRoot[dataMarketAddress][epochId][b.root];
        return others * 2 >= getTotalValidatorsCount(dataMarketAddress);
    }

    function tryFinalize(address dataMarketAddress, uint256 epochId) private {
        Batch storage b = batches[dataMarketAddress][epochId];
        if (b.finalized) return;
        if (attestationsForRoot[dataMarketAddress][epochId][b.root] * 2 <= getTotalValidatorsCount(dataMarketAddress)) {
            return;
        }
        b.finalized = true;
        for (uint256 i = 0; i < b.projectIds.length; i++) {
            ConsensusStatus storage st = statuses[dataMarketAddress][b.projectIds[i]][epochId];
            st.status = SnapshotStatus.FINALIZED;
            st.timestamp = block.timestamp;
            if (epochId > lastFinalizedSnapshot[dataMarketAddress][b.projectIds[i]]) {
                lastFinalizedSnapshot[dataMarketAddress][b.projectIds[i]] = epochId;
            }
        }
        address[] storage all = attesters[dataMarketAddress][epochId];
        for (uint256 i = 0; i < all.length; i++) {
            if (attestedRoot[dataMarketAddress][epochId][all[i]] != b.root) {
                divergent[dataMarketAddress][epochId].push(all[i]);
            }
        }
        emit SnapshotBatchFinalized(dataMarketAddress, epochId, b.batchCid, block.timestamp);
    }

    /// A project's CID for an epoch and its status: `("", PENDING)` when no
    /// batch named it.
    function maxSnapshotsCid(address dataMarketAddress, string calldata projectId, uint256 epochId)
        external
        view
        returns (string memory, SnapshotStatus)
    {
        ConsensusStatus storage st = statuses[dataMarketAddress][projectId][epochId];
        return (st.snapshotCid, st.status);
    }

    function snapshotStatus(address dataMarketAddress, string calldata projectId, uint256 epochId)
        external
        view
        returns (SnapshotStatus status, string memory snapshotCid, uint256 timestamp)
    {
        ConsensusStatus storage st = statuses[dataMarketAddress][projectId][epochId];
        return (st.status, st.snapshotCid, st.timestamp);
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
    /// `cid`, against the root the epoch was finalized with (the leaf and the
    /// pair hashing of docs/protocol.md §11: OpenZeppelin's standard tree).
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

    /// How many validators attested the epoch, whatever their root.
    function attestationsCount(address dataMarketAddress, uint256 epochId) external view returns (uint256) {
        return attesters[dataMarketAddress][epochId].length;
    }

    /// The validators of a finalized epoch whose root was not the finalized one.
    function divergentValidators(address dataMarketAddress, uint256 epochId) external view returns (address[] memory) {
        return divergent[dataMarketAddress][epochId];
    }

    /// Starts the next day for a data market.
    function startDay(address dataMarketAddress) external onlyOwner returns (uint256 dayId) {
        dayId = ++currentDayId[dataMarketAddress];
        emit DayStartedEvent(dataMarketAddress, dayId, block.timestamp);
    }
}
