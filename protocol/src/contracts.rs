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
    function slotSnapshotterMapping(uint256 slotId) external view returns (address);
    function allSnapshotters(address snapshotter) external view returns (bool);
}
