#!/usr/bin/env python3
"""firebase-admin against the RichPush FCM emulator.

usage: firebase_admin_peer.py check|bench SANDBOX_DIR PORT TOKEN [COUNT]

check: sends with send() and send_each_async(), then messages FCM rejects, and prints the outcomes as JSON.
bench: sends COUNT messages with send_each_async in batches of 500 and prints the rate as JSON.
"""
import asyncio, json, os, sys, time

mode, folder, port, token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
count = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
ca = os.path.join(folder, "ca.pem")
os.environ["REQUESTS_CA_BUNDLE"] = ca  # google-auth's token refresh and the synchronous client
os.environ["SSL_CERT_FILE"] = ca       # httpx, used by send_each_async

import firebase_admin
from firebase_admin import credentials, messaging, exceptions

messaging._MessagingService.FCM_URL = f"https://127.0.0.1:{port}/v1/projects/{{0}}/messages:send"
app = firebase_admin.initialize_app(credentials.Certificate(os.path.join(folder, "service-account.json")))

def message(i=0, **extra):
    return messaging.Message(token=token, notification=messaging.Notification(title="from firebase-admin", body=f"n{i}", image="https://x.test/a.png"),
                             apns=messaging.APNSConfig(payload=messaging.APNSPayload(aps=messaging.Aps(mutable_content=True))), **extra)

async def check():
    out = {"send": messaging.send(message())}
    batch = await messaging.send_each_async([message(i) for i in range(3)])
    out["send_each_async_ok"] = batch.success_count
    out["dry_run"] = messaging.send(message(), dry_run=True)
    try:
        messaging.send(messaging.Message(token="unregistered-token-0001", notification=messaging.Notification(title="x")))
        out["unregistered"] = "accepted"
    except exceptions.FirebaseError as e:
        out["unregistered"] = f"{type(e).__name__}:{e.code}"
    try:
        messaging.send(messaging.Message(topic="news", notification=messaging.Notification(body="x" * 2100)))
        out["too_big"] = "accepted"
    except exceptions.FirebaseError as e:
        out["too_big"] = f"{type(e).__name__}:{e.code}"
    print(json.dumps(out))

async def bench():
    await messaging.send_each_async([message()])
    start = time.perf_counter()
    ok = 0
    for offset in range(0, count, 500):
        r = await messaging.send_each_async([message(i) for i in range(offset, min(count, offset + 500))])
        ok += r.success_count
    seconds = time.perf_counter() - start
    print(json.dumps({"sent": count, "ok": ok, "seconds": seconds, "rate": count / seconds}))

asyncio.run(check() if mode == "check" else bench())
