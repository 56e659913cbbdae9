#!/usr/bin/env python3
"""An independent computation of one BDS base snapshot, straight from
JSON-RPC with Python integers, for the tests to compare the compute against.

    bds_expected.py RPC_URL POOL BEGIN END [STABLECOINS ROUTE_POOLS]

Prints the snapshot's fields as JSON (everything but previousSnapshots).
With STABLECOINS and ROUTE_POOLS (comma-separated addresses) the USD fields
are computed too.
Definitions: computes/bds-uniswapv3/src/lib.rs.
"""
import json
import sys
import urllib.request

SWAP = "0xc42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67"
MINT = "0x7a53080ba414158be7ec69b987b5fb7d07dee101fe85488f0853ae16239d0bde"
BURN = "0x0c396cd989a39f4459b5fa1aed6a9a8dcdbc45908acfd67e028cd568da98982c"
COLLECT = "0x70935338e69775456a85ddef226c395fb668b63fa0115f5f20610b388e6ca9c0"
Q192 = 2**192


def rpc(url, method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(url, body, {"content-type": "application/json"})
    answer = json.load(urllib.request.urlopen(req))
    if "error" in answer:
        raise SystemExit(f"{method}: {answer['error']}")
    return answer["result"]


def words(hexdata):
    h = hexdata[2:]
    return [int(h[i : i + 64], 16) for i in range(0, len(h), 64)]


def signed(x):
    return x - 2**256 if x >= 2**255 else x


def dec(value, scale):
    s = str(value).rjust(scale + 1, "0")
    return s if scale == 0 else s[:-scale] + "." + s[-scale:]


def main(url, pool, begin, end, stables=(), routes=()):
    pool = pool.lower()
    call = lambda to, data, block="latest": words(rpc(url, "eth_call", [{"to": to, "data": data}, block]))
    address = lambda w: "0x%040x" % w

    def meta(p):
        t0 = address(call(p, "0x0dfe1681")[0])
        t1 = address(call(p, "0xd21220a7")[0])
        return t0, t1, call(t0, "0x313ce567")[0], call(t1, "0x313ce567")[0]

    def price_of(p, token, block):
        t0, t1, d0, d1 = meta(p)
        s = call(p, "0x3850c7bd", hex(block))[0]
        return s * s * 10 ** (d0 + 18) // (Q192 * 10**d1) if token == t0 else Q192 * 10 ** (d1 + 18) // (s * s * 10**d0)

    def other_of(p, token):
        t0, t1, _, _ = meta(p)
        return t1 if token == t0 else t0

    def route(token):
        for r in routes:
            t0, t1, _, _ = meta(r)
            if token in (t0, t1) and other_of(r, token) in stables:
                return r
        return None

    def usd(token, block):
        if token in stables:
            return 10**18
        r = route(token)
        if r:
            return price_of(r, token, block)
        other = other_of(pool, token)
        via = 10**18 if other in stables else price_of(route(other), other, block)
        return price_of(pool, token, block) * via // 10**18

    token0, token1, dec0, dec1 = meta(pool)
    fee = call(pool, "0xddca3f43")[0]
    balance = "0x70a08231" + pool[2:].rjust(64, "0")
    sqrt_at, r0, r1, p0, p1, ts = {}, {}, {}, {}, {}, {}
    for b in range(begin, end + 1):
        tag = hex(b)
        sqrt = call(pool, "0x3850c7bd", tag)[0]
        sqrt_at[b] = sqrt
        r0[str(b)] = dec(call(token0, balance, tag)[0], dec0)
        r1[str(b)] = dec(call(token1, balance, tag)[0], dec1)
        p0[str(b)] = dec(sqrt * sqrt * 10 ** (dec0 + 18) // (Q192 * 10**dec1), 18)
        p1[str(b)] = dec(Q192 * 10 ** (dec1 + 18) // (sqrt * sqrt * 10**dec0), 18)
        ts[str(b)] = int(rpc(url, "eth_getBlockByNumber", [tag, False])["timestamp"], 16)
    logs = rpc(url, "eth_getLogs", [{"address": pool, "fromBlock": hex(begin), "toBlock": hex(end), "topics": [[SWAP, MINT, BURN, COLLECT]]}])
    scale = max(18, dec1)
    trade0 = trade1 = mb0 = mb1 = mb_value = 0
    for log in logs:
        w = words(log["data"])
        block = int(log["blockNumber"], 16)
        topic = log["topics"][0]
        if topic == SWAP:
            trade0 += abs(signed(w[0]))
            trade1 += abs(signed(w[1]))
        elif topic in (MINT, BURN):
            a0, a1 = (w[2], w[3]) if topic == MINT else (w[1], w[2])
            mb0 += a0
            mb1 += a1
            sqrt = sqrt_at[block]
            mb_value += a1 * 10 ** (scale - dec1) + a0 * sqrt * sqrt * 10**scale // (Q192 * 10**dec1)
    out = {
        "address": pool,
        "epoch": {"begin": begin, "end": end},
        "timestamps": ts,
        "token0": token0,
        "token1": token1,
        "token0Reserves": r0,
        "token1Reserves": r1,
        "token0Prices": p0,
        "token1Prices": p1,
        "token0TradeVolume": dec(trade0, dec0),
        "token1TradeVolume": dec(trade1, dec1),
        "token0MintBurnVolume": dec(mb0, dec0),
        "token1MintBurnVolume": dec(mb1, dec1),
        "totalTrade": dec(trade1, dec1),
        "totalFee": dec(trade1 * fee, dec1 + 6),
        "totalTradeMintBurn": dec(mb_value, scale),
        "logCounts": {"swap": sum(l["topics"][0] == SWAP for l in logs), "mint": sum(l["topics"][0] == MINT for l in logs),
                      "burn": sum(l["topics"][0] == BURN for l in logs), "collect": sum(l["topics"][0] == COLLECT for l in logs)},
    }
    if stables:
        d18 = lambda v: dec(v, 18)
        value = lambda amount, decimals, price: amount * price // 10**decimals
        rows = {}
        for b in range(begin, end + 1):
            tag = hex(b)
            u0, u1 = usd(token0, b), usd(token1, b)
            rows.setdefault("token0PricesUSD", {})[str(b)] = d18(u0)
            rows.setdefault("token1PricesUSD", {})[str(b)] = d18(u1)
            rows.setdefault("token0ReservesUSD", {})[str(b)] = d18(value(call(token0, balance, tag)[0], dec0, u0))
            rows.setdefault("token1ReservesUSD", {})[str(b)] = d18(value(call(token1, balance, tag)[0], dec1, u1))
        t0 = t1 = m0 = m1 = f = 0
        for log in logs:
            w = words(log["data"])
            block = int(log["blockNumber"], 16)
            u0, u1 = usd(token0, block), usd(token1, block)
            topic = log["topics"][0]
            if topic == SWAP:
                t0 += value(abs(signed(w[0])), dec0, u0)
                t1 += value(abs(signed(w[1])), dec1, u1)
                f += value(abs(signed(w[1])) * fee, dec1 + 6, u1)
            elif topic in (MINT, BURN):
                a0, a1 = (w[2], w[3]) if topic == MINT else (w[1], w[2])
                m0 += value(a0, dec0, u0)
                m1 += value(a1, dec1, u1)
        rows.update({
            "token0TradeVolumeUSD": d18(t0), "token1TradeVolumeUSD": d18(t1),
            "token0MintBurnVolumeUSD": d18(m0), "token1MintBurnVolumeUSD": d18(m1),
            "totalTradeUSD": d18(t1), "totalFeeUSD": d18(f), "totalTradeMintBurnUSD": d18(m0 + m1),
        })
        out.update(rows)
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) not in (5, 7):
        raise SystemExit(__doc__)
    usd_args = [[a.lower() for a in arg.split(",") if a] for arg in sys.argv[5:7]]
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *usd_args)
