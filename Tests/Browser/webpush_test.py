"""The web SDK in real headless Chromium (Debian's chromium and chromium-driver, driven with Selenium and the DevTools
protocol) against a real `richpush serve` in sandbox mode. Run by WebPushBrowserTests:

    python3 webpush_test.py BASE_URL ADMIN_KEY SANDBOX_ADMIN_URL SCREENSHOT_DIR

No push service is reachable here, so a push reaches the browser the way the issue allows: the sandbox's push
service receives what the server sends and decrypts it, and that message is delivered to the service worker with
DevTools' ServiceWorker.deliverPushMessage. Steps: an app, its VAPID key and a register-only key; a page of the
server loads /sdk/web/richpush.js and registers /sdk/web/sw.js; RichPush.subscribe says clearly why it cannot
subscribe here; a subscription the sandbox's push service makes for the app's key is registered from the page with
RichPush.register and the register-only key (a send-only key is refused), first without its user (no proof), then
with the user proved by the page's identity function (proofs signed with PyJWT, as a site's backend would: the first
expired, so the library asks again); a send with an image; the worker shows
it (getNotifications: title, body, image, tag) and posts its report, which the notification's receipts count.
Prints one line per step; exits non-zero at the first failure."""
import json
import os
import sys
import time
import urllib.request

import jwt
import websocket
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

base, admin, sandbox_admin, shots = sys.argv[1:5]
os.makedirs(shots, exist_ok=True)


def step(text):
    print("step:", text, flush=True)


def call(method, url, key=None, body=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def until(check, what, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


step("an app, its VAPID key and a key that may only register devices")
status, made = call("POST", base + "/v1/apps", admin, {"name": "Shop", "bundle_id": "com.example.shop"})
assert status == 201, made
app, manage = made["app"]["id"], made["api_key"]
status, vapid = call("POST", f"{base}/v1/apps/{app}/webpush/keys", manage,
                     {"subject": "mailto:ops@example.com", "default_url": "https://shop.example.com/"})
assert status == 201, vapid
public_key = vapid["webpush"]["public_key"]
status, reg = call("POST", f"{base}/v1/apps/{app}/keys", manage, {"scopes": ["register"]})
assert status == 201, reg
register_key = reg["api_key"]
status, snd = call("POST", f"{base}/v1/apps/{app}/keys", manage, {"scopes": ["send"]})
send_key = snd["api_key"]

options = webdriver.ChromeOptions()
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800",
             "--remote-allow-origins=*"]:
    options.add_argument(flag)
options.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_script_timeout(30)
devtools = None
try:
    step("a page of the server loads the SDK and registers the service worker")
    driver.get(base + "/console")
    driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": base, "permissions": ["notifications"]})
    loaded = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const s = document.createElement("script");
        s.src = "/sdk/web/richpush.js";
        s.onload = () => done(typeof RichPush === "object");
        s.onerror = () => done("the script did not load");
        document.head.appendChild(s);
    """)
    assert loaded is True, loaded
    state = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        navigator.serviceWorker.register("/sdk/web/sw.js").then((r) => {
            const w = r.installing || r.waiting || r.active;
            if (w.state === "activated") return done("activated");
            w.addEventListener("statechange", () => { if (w.state === "activated") done("activated"); });
        }, (e) => done("refused: " + e));
    """)
    assert state == "activated", state

    step("RichPush.subscribe says why it cannot subscribe when the browser's push service is out of reach")
    failure = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const timer = setTimeout(() => done("no answer in 20 s"), 20000);
        RichPush.subscribe({server: location.origin, app: arguments[0], key: arguments[1], publicKey: arguments[2],
                            worker: "/sdk/web/sw.js", timeoutSeconds: 5})
            .then(() => { clearTimeout(timer); done("subscribed"); },
                  (e) => { clearTimeout(timer); done(String(e && (e.name + ": " + e.message))); });
    """, app, register_key, public_key)
    print("  subscribe here:", failure, flush=True)
    # In a browser with a push service it subscribes; here the service is unreachable (or `ready` waits for a page
    # in the worker's scope): either way it must not claim success without a registered device.
    status, listed = call("GET", f"{base}/v1/apps/{app}/devices", manage)
    if failure == "subscribed":
        assert listed["devices"], listed
    else:
        assert failure.startswith("Error: RichPush: the browser") and not listed["devices"], (failure, listed)

    step("a subscription made for the app's key is registered from the page with the register-only key")
    status, subscription = call("POST", sandbox_admin + "/webpush/subscriptions", None,
                                {"application_server_key": public_key})
    assert status == 201, subscription
    refused = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        RichPush.register(arguments[0], {server: location.origin, app: arguments[1], key: arguments[2]})
            .then(() => done("registered"), (e) => done(e.status + " " + e.message));
    """, subscription, app, send_key)
    # A refusal is readable from the page too: its status and the server's message, not an opaque network error.
    assert refused.startswith("403") and "register" in refused, refused
    answer = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        RichPush.register(arguments[0], {server: location.origin, app: arguments[1], key: arguments[2],
                                         userId: "u-42", tags: ["fans"]})
            .then((a) => done(a), (e) => done(String(e)));
    """, subscription, app, register_key)
    assert isinstance(answer, dict) and answer["provider"] == "webpush", answer
    status, found = call("GET", f"{base}/v1/apps/{app}/devices?q=fans", manage)
    assert [d["platform"] for d in found["devices"]] == ["web"], found
    # Without a proof the key in the page speaks for the browser only: registered, without its user.
    assert "user_id" not in found["devices"][0], found

    step("the page's identity function proves its user; an expired proof is asked for again")
    status, identity_key = call("POST", f"{base}/v1/apps/{app}/identity/keys", manage, {})
    assert status == 201 and identity_key["private_key"].startswith("-----BEGIN"), identity_key
    now = int(time.time())

    def proof(**claims):
        return jwt.encode(dict({"sub": "u-42", "aud": app}, **claims), identity_key["private_key"],
                          algorithm="ES256", headers={"kid": identity_key["kid"]})

    proved = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const proofs = [arguments[3], arguments[4]];
        let asked = 0;
        RichPush.register(arguments[0], {server: location.origin, app: arguments[1], key: arguments[2],
                                         userId: "u-42", tags: ["fans"],
                                         identity: async (user) => { asked += 1; return user === "u-42" ? proofs.shift() : null; }})
            .then((a) => done({answer: a, asked: asked}), (e) => done(String(e)));
    """, subscription, app, register_key, proof(iat=now - 7200, exp=now - 3600), proof(iat=now, exp=now + 600))
    assert isinstance(proved, dict) and proved["asked"] == 2, proved
    status, found = call("GET", f"{base}/v1/apps/{app}/devices?q=u-42", manage)
    assert [d.get("user_id") for d in found["devices"]] == ["u-42"], found
    # A claimed user without a proof is refused, and the refusal names the rule.
    refused = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch(location.origin + "/v1/apps/" + arguments[1] + "/devices", {method: "POST",
              headers: {authorization: "Bearer " + arguments[2], "content-type": "application/json"},
              body: JSON.stringify({platform: "web", subscription: arguments[0], user_id: "bob"})})
            .then((r) => r.json().then((j) => done(r.status + " " + j.error.code)), (e) => done("unreadable: " + e));
    """, subscription, app, register_key)
    assert refused == "401 identity-required", refused
    status, found = call("GET", f"{base}/v1/apps/{app}/devices?q=fans", manage)
    # The page was granted notifications: the library says so.
    assert found["devices"][0].get("permission") == "authorized", found
    preflight = urllib.request.urlopen(urllib.request.Request(f"{base}/v1/apps/{app}/devices", method="OPTIONS",
                                                              headers={"Origin": "https://shop.example.com"}))
    assert preflight.status == 204 and preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "richpush-identity" in preflight.headers["Access-Control-Allow-Headers"], preflight.headers
    # From another origin (localhost, a document with no CSP of ours), with a preflight: a wrong key's 401 reads.
    port = base.rsplit(":", 1)[1]
    driver.get(f"http://localhost:{port}/sdk/web/richpush.js")
    unknown = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch(arguments[1] + "/v1/apps/" + arguments[0] + "/devices", {method: "POST",
              headers: {authorization: "Bearer rp_not_a_key", "content-type": "application/json"}, body: "{}"})
            .then((r) => r.json().then((j) => done(r.status + " " + j.error.code)), (e) => done("unreadable: " + e));
    """, app, base)
    assert unknown == "401 unauthenticated", unknown
    driver.get(base + "/console")

    step("a send with an image reaches the sandbox's push service, encrypted for this subscription")
    status, sent = call("POST", f"{base}/v1/apps/{app}/notifications", manage, {
        "title": "Goal!", "body": "2–1 in the 90th", "media": base + "/console/console.css",
        "collapse_id": "match-42", "audience": {"tag": "fans"}, "media_check": "skip",
        "web": {"actions": [{"action": "watch", "title": "Watch", "navigate": "https://shop.example.com/live"}]}})
    if status not in (200, 201, 202):
        # A stylesheet is no picture: when the server checks media, host a real PNG instead.
        png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                            "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")
        request = urllib.request.Request(base + "/v1/media", data=png, method="POST",
                                         headers={"Authorization": "Bearer " + manage, "Content-Type": "image/png"})
        image = json.loads(urllib.request.urlopen(request).read())["url"]
        status, sent = call("POST", f"{base}/v1/apps/{app}/notifications", manage, {
            "title": "Goal!", "body": "2–1 in the 90th", "media": image, "collapse_id": "match-42",
            "web": {"icon": image, "actions": [{"action": "watch", "title": "Watch", "navigate": "https://shop.example.com/live"}]},
            "audience": {"tag": "fans"}})
    assert status in (200, 201, 202), sent
    notification = sent["id"]
    pushed = until(lambda: [n for n in call("GET", sandbox_admin + "/webpush/notifications")[1]["notifications"]
                            if n["message"].get("notification", {}).get("data", {}).get("rp", {}).get("id") == notification],
                   "the push service to receive the send")[0]
    message = pushed["message"]
    image = message["notification"]["image"]
    assert message["web_push"] == 8030 and message["notification"]["title"] == "Goal!", message
    assert message["notification"]["data"]["rp"]["receipt"].startswith(base), message

    step("DevTools delivers the message to the worker, which shows it and posts its report")
    address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
    targets = json.loads(urllib.request.urlopen(f"http://{address}/json").read())
    page = next(t for t in targets if t["type"] == "page")
    devtools = websocket.create_connection(page["webSocketDebuggerUrl"], suppress_origin=True, timeout=30)
    sequence = [0]

    def cdp(method, params=None):
        sequence[0] += 1
        devtools.send(json.dumps({"id": sequence[0], "method": method, "params": params or {}}))
        events = []
        while True:
            m = json.loads(devtools.recv())
            if m.get("id") == sequence[0]:
                if "error" in m:
                    raise AssertionError(f"{method}: {m['error']}")
                return m.get("result"), events
            events.append(m)

    _, events = cdp("ServiceWorker.enable")
    registration = None
    deadline = time.time() + 20
    while registration is None and time.time() < deadline:
        for e in events:
            if e.get("method") == "ServiceWorker.workerRegistrationUpdated":
                for r in e["params"]["registrations"]:
                    if r["scopeURL"].startswith(base + "/sdk/web/") and not r["isDeleted"]:
                        registration = r["registrationId"]
        if registration is None:
            events = [json.loads(devtools.recv())]
    assert registration is not None, "no registration event from DevTools"
    cdp("ServiceWorker.deliverPushMessage", {"origin": base, "registrationId": registration,
                                             "data": json.dumps(message)})
    receipts = until(lambda: (lambda r: r if r.get("count") == 1 else None)(
        call("GET", f"{base}/v1/apps/{app}/notifications/{notification}", manage)[1]["receipts"]),
        "the worker's report")
    print("  receipts:", json.dumps(receipts), flush=True)
    shown = until(lambda: driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        navigator.serviceWorker.getRegistration("/sdk/web/").then((r) => r.getNotifications()).then(
            (all) => done(all.map((n) => ({title: n.title, body: n.body, image: n.image, tag: n.tag,
                                           navigate: (n.data || {}).navigate,
                                           actions: (n.actions || []).map((a) => a.action + ":" + a.title),
                                           targets: ((n.data || {}).actions || []).map((a) => a.navigate)}))),
            (e) => done(null));
    """), "the notification the worker shows")
    assert shown[0]["title"] == "Goal!" and shown[0]["body"] == "2–1 in the 90th", shown
    assert shown[0]["image"] == image and shown[0]["tag"] == "match-42", shown
    assert shown[0]["navigate"] == "https://shop.example.com/", shown
    assert shown[0]["actions"] == ["watch:Watch"] and shown[0]["targets"] == ["https://shop.example.com/live"], shown
    assert receipts["with_media"] == 1, receipts
    print("  shown:", json.dumps(shown[0]), flush=True)
    driver.save_screenshot(os.path.join(shots, "webpush-page.png"))

    step("the console previews what a browser shows and test-sends to this browser")
    def typed(i, text):
        e = driver.find_element("id", i)
        e.clear()
        e.send_keys(text)

    driver.execute_script("sessionStorage.clear()")
    driver.get(base + "/console")
    driver.refresh()
    until(lambda: driver.execute_script("const e = document.getElementById('signin-key'); return e && e.offsetParent !== null"), "the sign-in form")
    typed("signin-key", manage)
    driver.find_element("id", "signin-form").submit()
    until(lambda: "#" in driver.current_url or driver.execute_script("return !!sessionStorage.getItem('richpush.key')"), "signing in")
    driver.get(base + "/console#compose")
    until(lambda: driver.execute_script("const e = document.getElementById('f-title'); return e && e.offsetParent !== null"), "the compose form")

    typed("f-title", "Half time")
    typed("f-body", "1–1 at the break")
    typed("f-media", image)
    driver.find_element("id", "f-title").click()
    until(lambda: "browser" in driver.find_element("id", "reach").text, "the reach with browsers counted")
    assert "1 browser through Web Push" in driver.find_element("id", "reach").text, driver.find_element("id", "reach").text
    driver.find_element("id", "tab-web").click()
    until(lambda: "Half time" in driver.find_element("id", "panel-web").text, "the Web preview")
    # The text is drawn at once and the picture once the server's check of the media answers: wait for it.
    def web_images():
        return [e.get_attribute("src") for e in driver.find_elements("css selector", "#panel-web img")]
    until(lambda: image in web_images(), "the picture in the Web preview")
    assert image in web_images(), web_images()
    assert "A click opens https://shop.example.com/" in driver.find_element("id", "web-navigate").text
    driver.find_element("id", "tab-sent").click()
    sent = json.loads(until(lambda: driver.execute_script("const e = document.getElementById('sent-webpush'); return e && e.textContent"), "the Web Push request"))
    assert sent["payload"]["notification"]["title"] == "Half time" and sent["headers"]["Content-Encoding"] == "aes128gcm", sent
    driver.find_element("id", "tab-web").click()
    driver.execute_script("document.getElementById('panel-web').scrollIntoView()")
    driver.save_screenshot(os.path.join(shots, "webpush-console.png"))
    token = answer["token"]
    typed("f-test-token", token)
    driver.find_element("id", "test-send").click()
    outcome = until(lambda: driver.execute_script("const e = document.getElementById('test-outcome'); return e && e.textContent"), "the test send's outcome")
    assert outcome == "Web Push: delivered", outcome
    assert any(n["message"]["notification"]["title"] == "Half time" for n in call("GET", sandbox_admin + "/webpush/notifications")[1]["notifications"])
    print("web push browser test: every step passed", flush=True)
except Exception:
    driver.save_screenshot(os.path.join(shots, "webpush-failure.png"))
    raise
finally:
    if devtools:
        devtools.close()
    driver.quit()
