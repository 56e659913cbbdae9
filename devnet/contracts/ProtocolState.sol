// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// ProtocolState for the local network: the part of Powerloom's protocol
/// state a lite node reads (epochs, days, the slot registry, the node count),
/// with owner-only setters so tests and the devnet can drive it.
contract ProtocolState {
    event EpochReleased(
        address indexed dataMarketAddress, uint256 indexed epochId, uint256 begin, uint256 end, uint256 timestamp
    );
    event DayStartedEvent(address indexed dataMarketAddress, uint256 dayId, uint256 timestamp);
    event DailyTaskCompletedEvent(
        address indexed dataMarketAddress, address snapshotterAddress, uint256 slotId, uint256 dayId, uint256 timestamp
    );
    event SlotRegistered(uint256 indexed slotId, address indexed snapshotter);

    address public owner;
    uint256 private totalNodeCount;
    mapping(address => uint256) public currentEpochId;
    mapping(address => uint256) public currentDayId;
    mapping(uint256 => address) public slotSnapshotterMapping;
    mapping(address => bool) public allSnapshotters;

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

    /// Starts the next day for a data market.
    function startDay(address dataMarketAddress) external onlyOwner returns (uint256 dayId) {
        dayId = ++currentDayId[dataMarketAddress];
        emit DayStartedEvent(dataMarketAddress, dayId, block.timestamp);
    }
}
