"""Loaded by Scripts/fuzz-api (SCHEMATHESIS_HOOKS=fuzz_api_hooks).

Formats: docs/openapi.yaml names the values that must be more than well shaped to be accepted (a key that
parses, a service account whose private key is an RSA key, a media URL that answers with media, a time within
the send window, an FCM condition). Each gets a strategy that yields real ones: the keys the script made, the
files it hosted on the server under test, times around now.

Check: an operation may list the rules a schema-valid request can still break (x-rules-beyond-schema): rules
that relate fields to each other or to the world. Such an operation may answer 422 to valid data, but only
naming those rules; any other rule in a refusal of schema-valid data is a contract failure.
"""
import json
import os
import time

import schemathesis
from hypothesis import strategies as st

_keys = os.environ.get("RICHPUSH_FUZZ_KEYS", "")


def _read(name):
    with open(os.path.join(_keys, name)) as f:
        return f.read()


if _keys:
    p8 = _read("apns.p8")
    rsa = _read("rsa.pem")
    schemathesis.openapi.format("apns-p8", st.just(p8))
    schemathesis.openapi.format("rsa-private-key", st.just(rsa))
    projects = st.sampled_from(["richpush-fuzz", "example-123456", "example.com:shop-app"])
    schemathesis.openapi.format(
        "service-account",
        st.builds(
            lambda project, email: json.dumps({
                "type": "service_account", "project_id": project, "private_key_id": "k1", "private_key": rsa,
                "client_email": email, "token_uri": "https://oauth2.googleapis.com/token"}),
            projects, st.sampled_from(["push@richpush-fuzz.iam.gserviceaccount.com", "a@b.example"])))

_media = [u for u in os.environ.get("RICHPUSH_FUZZ_MEDIA", "").split(",") if u]
if _media:
    schemathesis.openapi.format("media-url", st.sampled_from(_media))
    # Hosted files by name, so that GET and HEAD /media/{name} reach real files with fuzzed Range and conditions.
    schemathesis.openapi.format("media-name", st.sampled_from([u.rsplit("/", 1)[-1] for u in _media]))

# Receipt addresses the server gave real deliveries, so that a report reaches its decoding and the one-report-per-
# delivery rule (the first post for an address is 201, later ones 409), beside made-up addresses (403).
_receipts = [t for t in os.environ.get("RICHPUSH_FUZZ_RECEIPTS", "").split(",") if t]
if _receipts:
    schemathesis.openapi.format("receipt-token", st.sampled_from(_receipts))

# Times from an hour ago (read as now) to 27 days ahead, measured when each is drawn.
schemathesis.openapi.format(
    "send-time", st.floats(min_value=-3600, max_value=27 * 86400).map(lambda offset: round(time.time() + offset, 3)))

# A webhook replay's times: RFC 3339, from three days ago (what is kept) to a minute ahead, measured when each is drawn.
schemathesis.openapi.format(
    "webhook-time",
    st.floats(min_value=-3 * 86400 + 60, max_value=60).map(
        lambda offset: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))))

_topic = st.from_regex(r"\A[a-z][a-z0-9_]{0,20}\Z")
schemathesis.openapi.format(
    "fcm-condition",
    st.lists(_topic, min_size=1, max_size=5).flatmap(lambda topics: st.lists(
        st.sampled_from([" && ", " || "]), min_size=len(topics) - 1, max_size=len(topics) - 1).map(
        lambda ops: "".join(f"'{t}' in topics" + (ops[i] if i < len(ops) else "") for i, t in enumerate(topics)))))


def _permitted(issue, allowed, code):
    rule, path = issue.get("rule", ""), issue.get("path", "")
    for entry in allowed:
        if entry.startswith("code:"):
            if entry[5:] == code:
                return True
        elif ":" in entry:
            where, what = entry.rsplit(":", 1)
            if what == rule and (path == where or path.startswith(where + ".") or path.startswith(where + "[")):
                return True
        elif entry == rule:
            return True
    return False


@schemathesis.check
def refusals_of_valid_data_name_rules_beyond_the_schema(ctx, response, case):
    """A 422 to schema-valid data names only the rules its operation lists in x-rules-beyond-schema."""
    meta = case.meta
    if response.status_code != 422 or meta is None or not meta.generation.mode.is_positive:
        return None
    allowed = case.operation.definition.raw.get("x-rules-beyond-schema")
    if not allowed:
        return None  # positive_data_acceptance already refuses a 422 here
    try:
        error = response.json()["error"]
    except Exception:
        raise AssertionError("a 422 without the error object")
    errors = [i for i in error.get("issues", []) if i.get("severity", "error") == "error"]
    if not errors:
        raise AssertionError(f"a 422 ({error.get('code')}) names no rule")
    bad = [i for i in errors if not _permitted(i, allowed, error.get("code", ""))]
    if bad:
        raise AssertionError(
            "schema-valid data refused for rules the schema could have said: "
            + "; ".join(f"{i.get('path')}: {i.get('rule')} ({i.get('message')})" for i in bad))
    return None

# Browsers' push subscriptions: a P-256 public key and a 16-byte secret that are real (the server reads both), at
# an https endpoint of a made-up push service.
try:
    import base64
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    def _b64(raw):
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    _browser_keys = [
        _b64(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint))
        for _ in range(4)]
    _subscriptions = st.builds(
        lambda path, key, auth: {"endpoint": "https://push.example.net/w/" + path, "keys": {"p256dh": key, "auth": _b64(auth)}},
        st.from_regex(r"\A[A-Za-z0-9_-]{1,40}\Z"), st.sampled_from(_browser_keys), st.binary(min_size=16, max_size=16))
    schemathesis.openapi.format("webpush-subscription", _subscriptions)
    schemathesis.openapi.format(
        "webpush-token",
        _subscriptions.map(lambda s: s["endpoint"] + "#" + s["keys"]["p256dh"] + "." + s["keys"]["auth"]))
except ImportError:
    pass

# Identity keys an app's backend uploads: real P-256 public keys in PEM (POST /v1/apps/{app}/identity/keys), so
# that the fuzzer reaches the two-key bound and the rotation rather than stopping at the key's parsing.
try:
    _identity_keys = [
        ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        for _ in range(4)]
    schemathesis.openapi.format("p256-public-key", st.sampled_from(_identity_keys))
except NameError:
    pass
