// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

import "../src/ProtocolState.sol";

/// @title ProtocolStateDrills
/// @notice TEST ONLY: ProtocolState plus the hooks the devnet and the tests
/// use to drive faults. Never deploy it for a real data market.
contract ProtocolStateDrills is ProtocolState {
    bool private nodeCountSet;
    uint256 private nodeCount;

    /// `initialNodeCount` > 0 sets the node count as `setTotalNodeCount`
    /// does; 0 leaves the registered-slot count in force.
    constructor(uint256 initialNodeCount) ProtocolState() {
        if (initialNodeCount > 0) {
            nodeCountSet = true;
            nodeCount = initialNodeCount;
        }
    }

    /// The count set by `setTotalNodeCount`, once set; else the number of
    /// registered slots.
    function getTotalNodeCount() public view override returns (uint256) {
        return nodeCountSet ? nodeCount : super.getTotalNodeCount();
    }

    /// Fixes the node count whatever slots are registered.
    function setTotalNodeCount(uint256 n) external onlyOwner {
        nodeCountSet = true;
        nodeCount = n;
    }

    /// Releases an epoch with an explicit id (gaps, repeats, other markets),
    /// with no range, contiguity or day rule.
    function releaseEpochWithId(address dataMarketAddress, uint256 epochId, uint256 begin, uint256 end)
        external
        onlyOwner
    {
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
}
