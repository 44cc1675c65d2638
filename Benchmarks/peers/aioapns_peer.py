#!/usr/bin/env python3
"""aioapns against the RichPush APNs emulator.

usage: aioapns_peer.py check|bench SANDBOX_DIR PORT TOKEN [COUNT] [CONCURRENCY]

check: delivers one notification, then sends requests APNs rejects and prints the reasons as JSON.
bench: sends COUNT notifications with CONCURRENCY in flight and prints the rate as JSON.
"""
import asyncio, json, os, ssl, sys, time, uuid
from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection

mode, folder, port, token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
count = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
concurrency = int(sys.argv[6]) if len(sys.argv) > 6 else 100

# Point the development endpoint at the emulator on loopback.
connection.APNsDevelopmentClientProtocol.APNS_SERVER = "127.0.0.1"
connection.APNsDevelopmentClientProtocol.APNS_PORT = port
meta = json.load(open(os.path.join(folder, "apns.json")))
context = ssl.create_default_context(cafile=os.path.join(folder, "ca.pem"))

def client():
    return APNs(key=open(os.path.join(folder, "apns-key.p8")).read(), key_id=meta["key_id"], team_id=meta["team_id"],
                topic="com.example.app", use_sandbox=True, ssl_context=context, max_connections=4)

async def check():
    apns = client()
    out = {}
    ok = await apns.send_notification(NotificationRequest(device_token=token, message={"aps": {"alert": {"title": "from aioapns"}, "mutable-content": 1}}, push_type=PushType.ALERT))
    out["delivered"] = ok.is_successful
    out["status"] = ok.status
    cases = {
        "bad_token": NotificationRequest(device_token="zz" * 32, message={"aps": {"alert": "x"}}),
        "too_large": NotificationRequest(device_token=token, message={"aps": {"alert": "x" * 5000}}),
        "bad_priority": NotificationRequest(device_token=token, message={"aps": {"content-available": 1}}, priority=10, push_type=PushType.BACKGROUND),
        "bad_collapse_id": NotificationRequest(device_token=token, message={"aps": {"alert": "x"}}, collapse_key="c" * 65),
    }
    for name, req in cases.items():
        r = await apns.send_notification(req)
        out[name] = r.description
    print(json.dumps(out))

async def bench():
    apns = client()
    await apns.send_notification(NotificationRequest(device_token=token, message={"aps": {"alert": "warm"}}))
    sem = asyncio.Semaphore(concurrency)
    ok = 0
    async def one(i):
        nonlocal ok
        async with sem:
            r = await apns.send_notification(NotificationRequest(device_token=token, message={"aps": {"alert": {"title": "t", "body": f"n{i}"}, "mutable-content": 1}}))
            ok += 1 if r.is_successful else 0
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    seconds = time.perf_counter() - start
    print(json.dumps({"sent": count, "ok": ok, "seconds": seconds, "rate": count / seconds}))

asyncio.run(check() if mode == "check" else bench())
