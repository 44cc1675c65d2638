"""The peer of `richpush-bench webpush-encrypt`: the same work per message with http_ece and py_vapid (what
pywebpush builds each push from): encrypt a message for a subscription, and sign a VAPID token. Prints JSON."""
import json, os, sys, time
import http_ece
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid02

count, size = int(sys.argv[1]), int(sys.argv[2])
receiver = ec.generate_private_key(ec.SECP256R1())
public = receiver.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
auth = os.urandom(16)
message = b"x" * size
vapid = Vapid02()
vapid.generate_keys()
start = time.perf_counter()
for _ in range(count):
    http_ece.encrypt(message, private_key=ec.generate_private_key(ec.SECP256R1()), dh=public, auth_secret=auth,
                     version="aes128gcm")
encrypt = time.perf_counter() - start
start = time.perf_counter()
for _ in range(count):
    vapid.sign({"aud": "https://push.example.net", "exp": int(time.time()) + 3600, "sub": "mailto:ops@example.com"})
sign = time.perf_counter() - start
print(json.dumps({"encrypt_us": encrypt / count * 1e6, "sign_us": sign / count * 1e6}))
