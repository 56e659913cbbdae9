# Swaps, mints, then burns+collects on the 1,000-pool world, in two blocks.
import json,urllib.request
import sys
URL=sys.argv[1] if len(sys.argv)>1 else "http://127.0.0.1:18545"
def rpc(m,p):
    r=urllib.request.urlopen(urllib.request.Request(URL,json.dumps({"jsonrpc":"2.0","id":1,"method":m,"params":p}).encode(),{"content-type":"application/json"}))
    v=json.load(r)
    if "error" in v: raise Exception(f"{m}: {v['error']}")
    return v["result"]
m=json.load(open(__import__('os').path.join(__import__('os').path.dirname(__file__),'world-1000','manifest.json')))
dep=m['deployer']; router=m['swapRouter']; pm=m['positionManager']
def w(v): return format(v % (1<<256),'064x')
def a(x): return x[2:].lower().rjust(64,'0')
def send(to,data):
    return rpc("eth_sendTransaction",[{"from":dep,"to":to,"data":data,"gas":hex(1_500_000)}])
rpc("evm_setAutomine",[False])
spacing={500:10,3000:60,10000:200}
pools=m['pools']
mints=[]
for i,p in enumerate(pools):
    if i%3==0:
        zf1 = (i//3)%2==0
        tin,tout=(p['token0'],p['token1']) if zf1 else (p['token1'],p['token0'])
        amt=(1+i%9)*10**16
        data="0x414bf389"+a(tin)+a(tout)+w(p['fee'])+a(dep)+w(1<<40)+w(amt)+w(0)+w(0)
        send(router,data)
    elif i%3==1 and i<600:
        s=spacing[p['fee']]; hi=(887272//s)*s
        lo,hi2 = (-hi, hi) if i%2 else (-s*100, s*50)
        data="0x88316456"+a(p['token0'])+a(p['token1'])+w(p['fee'])+w(lo)+w(hi2)+w(10**17)+w(10**17)+w(0)+w(0)+a(dep)+w(1<<40)
        mints.append(send(pm,data))
rpc("evm_mine",[])
b=int(rpc("eth_blockNumber",[]),16)
blk=rpc("eth_getBlockByNumber",[hex(b),False])
print("block",b,"txs",len(blk["transactions"]))
fails=0; ids=[]
for h in blk["transactions"]:
    r=rpc("eth_getTransactionReceipt",[h])
    if r["status"]!="0x1": fails+=1
    if h in mints:
        for l in r["logs"]:
            if l["address"].lower()==pm.lower() and l["topics"][0]=="0x3067048beee31b25b2f1681f88dac838c8bba36af25bfb2b7cf7473a5847e35f": # IncreaseLiquidity
                ids.append((int(l["topics"][1],16), int(l["data"][2:66],16)))
print("failed",fails,"positions",len(ids))
# block 2: decrease half the new positions' liquidity, and collect
MAXU128=(1<<128)-1
for tid,liq in ids[::2]:
    send(pm,"0x0c49ccbe"+w(tid)+w(liq//2)+w(0)+w(0)+w(1<<40))
    send(pm,"0xfc6f7865"+w(tid)+a(dep)+w(MAXU128)+w(MAXU128))
rpc("evm_mine",[])
b2=int(rpc("eth_blockNumber",[]),16)
blk=rpc("eth_getBlockByNumber",[hex(b2),False])
fails=sum(rpc("eth_getTransactionReceipt",[h])["status"]!="0x1" for h in blk["transactions"])
print("block",b2,"txs",len(blk["transactions"]),"failed",fails)
rpc("evm_setAutomine",[True])
