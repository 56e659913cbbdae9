//! ABI bindings of ProtocolState as the protocol's participants read it
//! (docs/protocol.md §1).

alloy::sol! {
    event EpochReleased(
        address indexed dataMarketAddress,
        uint256 indexed epochId,
        uint256 begin,
        uint256 end,
        uint256 timestamp
    );
    event DayStartedEvent(address indexed dataMarketAddress, uint256 dayId, uint256 timestamp);
    event SlotRegistered(uint256 indexed slotId, address indexed snapshotter);

    function getTotalNodeCount() external view returns (uint256);
    // A market's operator (contracts/src/ProtocolState.sol).
    function owner() external view returns (address);
    function currentEpochId(address dataMarketAddress) external view returns (uint256);
    function lastReleasedEnd(address dataMarketAddress) external view returns (uint256);
    function epochsPerDay(address dataMarketAddress) external view returns (uint256);
    // The market's current day (0 before its first DayStartedEvent).
    function currentDayId(address dataMarketAddress) external view returns (uint256);
    function setEpochsPerDay(address dataMarketAddress, uint256 n) external;
    function releaseEpoch(address dataMarketAddress, uint256 begin, uint256 end) external returns (uint256);
    function isReleaser(address account) external view returns (bool);
    function setReleaser(address account, bool allowed) external;
    function isRegistrar(address account) external view returns (bool);
    function setRegistrar(address account, bool allowed) external;
    function transferOwnership(address newOwner) external;
    function registerSlot(uint256 slotId, address snapshotter) external;
    function reassignSlot(uint256 slotId, address snapshotter) external;
    function removeSlot(uint256 slotId) external;
    function slotSnapshotterMapping(uint256 slotId) external view returns (address);
    function allSnapshotters(address snapshotter) external view returns (bool);
    // Every change of `allSnapshotters` (a registration or reassignment
    // enabling its snapshotter included).
    event SnapshotterEnabled(address indexed snapshotter, bool enabled);

    // Full nodes (docs/protocol.md §13): slots whose submissions are accepted
    // for every active pool.
    event FullNodeUpdated(address indexed dataMarketAddress, uint256 indexed slotId, bool full);
    function setFullNode(address dataMarketAddress, uint256 slotId, bool full) external;
    function getFullNodes(address dataMarketAddress) external view returns (uint256[]);

    // The Protocol V2 batch flow (docs/protocol.md §12): per data market,
    // validators, one batch per epoch, attestations, finalized CIDs.
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
    function updateAddresses(address dataMarketAddress, uint8 role, address[] addrs, bool[] allowed) external;
    function getValidators(address dataMarketAddress) external view returns (address[]);
    function getTotalValidatorsCount(address dataMarketAddress) external view returns (uint256);
    function submitSubmissionBatch(
        address dataMarketAddress, string batchCid, uint256 epochId, bytes32 finalizedCidsRootHash
    ) external;
    // A finalized epoch's (project id, CID) pairs, stored part by part, each
    // part proved against the root (docs/protocol.md §12).
    event FinalizedCidsStored(address indexed dataMarketAddress, uint256 indexed epochId, uint256 added, uint256 stored);
    function storeFinalizedCids(
        address dataMarketAddress,
        uint256 epochId,
        string[] projectIds,
        string[] snapshotCids,
        bytes32[] proof,
        bool[] proofFlags
    ) external;
    function storedCids(address dataMarketAddress, uint256 epochId) external view returns (uint256);
    function unstoredCids(address dataMarketAddress, uint256 epochId, string[] projectIds)
        external view returns (uint256);
    function submitBatchAttestation(
        address dataMarketAddress, string batchCid, uint256 epochId, bytes32 finalizedCidsRootHash
    ) external;
    /// `(cid, status)`: status 0 pending, 1 finalized; `("", 0)` for nothing.
    function maxSnapshotsCid(address dataMarketAddress, string projectId, uint256 epochId)
        external view returns (string, uint8);
    function lastFinalizedSnapshot(address dataMarketAddress, string projectId) external view returns (uint256);
    // Ours (contracts/src/ProtocolState.sol, docs/protocol.md §12).
    function epochBatch(address dataMarketAddress, uint256 epochId)
        external view returns (string batchCid, bytes32 root, address submitter, bool finalized);
    function attestedRoot(address dataMarketAddress, uint256 epochId, address validator)
        external view returns (bytes32);
    function attestationsForRoot(address dataMarketAddress, uint256 epochId, bytes32 root)
        external view returns (uint256);
    function attestationsCount(address dataMarketAddress, uint256 epochId) external view returns (uint256);
    function outvoted(address dataMarketAddress, uint256 epochId) external view returns (bool);
    function currentVotes(address dataMarketAddress, uint256 epochId)
        external view returns (uint256 forRoot, uint256 against);
    function finalize(address dataMarketAddress, uint256 epochId) external;
    function divergentValidators(address dataMarketAddress, uint256 epochId) external view returns (address[]);
    function verifyFinalizedCid(
        address dataMarketAddress, uint256 epochId, string projectId, string cid, bytes32[] proof
    ) external view returns (bool);
}
