"""The console's Webhooks view in real headless Chromium against a real `richpush serve` in sandbox mode, its
endpoints pointed at the sandbox's webhook receiver. Run by ConsoleBrowserTests:

    python3 webhooks_test.py BASE_URL ADMIN_KEY SANDBOX_DIR SCREENSHOT_DIR

Creates an app and a device through the API and signs in with the app's key. In the view: an http URL refused as
the API names it; an endpoint added at the receiver (its address offered by the console, as
GET /v1/me names it in sandbox mode, and checked against SANDBOX_DIR/sandbox.json), its secret shown once and gone when the view is left; a test the receiver verified answered 200 with
its time; disabled and enabled; with the receiver failing every request, a send makes it failing with its last
error and next attempt; a replay of the last hour; the secret rotated (shown once, the previous one named); the
deletion refused and then confirmed. Checks every state shown against the API, that server text is shown as text,
and the page at phone width. Writes screenshots. Prints one line per step; exits non-zero at the first failure."""
import json
import os
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, admin, sandbox_dir, shots = sys.argv[1:5]
os.makedirs(shots, exist_ok=True)
with open(os.path.join(sandbox_dir, "sandbox.json")) as f:
    summary = json.load(f)
receiver = summary["webhooks"]["url"] + "orders"
sandbox_admin = summary["admin"]


def step(text):
    print("step:", text, flush=True)


def call(method, url, key=None, body=None):
    """The API (a path) or the sandbox's admin (a URL); status and JSON."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(url if url.startswith("http") else base + url, method=method,
                                     data=None if body is None else json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


options = webdriver.ChromeOptions()
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900", "--force-device-scale-factor=1"]:
    options.add_argument(flag)
options.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_window_size(1280, 900)
by_id = lambda i: driver.find_element(By.ID, i)


def until(condition, what, timeout=30):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(lambda d: condition())
    except Exception:
        driver.save_screenshot(os.path.join(shots, "webhooks-failure.png"))
        raise AssertionError(f"timed out waiting for {what}")


def typed(i, text):
    e = by_id(i)
    e.clear()
    e.send_keys(text)


def card():
    return driver.find_element(By.CSS_SELECTOR, ".webhook")


def action(name):
    return card().find_element(By.CSS_SELECTOR, f'[data-action="{name}"]')


def facts():
    """The endpoint's facts as shown: each term and its value."""
    return driver.execute_script("""const out = {};
        for (const dt of document.querySelectorAll('.webhook .facts dt')) out[dt.textContent] = dt.nextElementSibling.textContent;
        return out""")


def listed_as(state):
    """Waits for the API to say the endpoint is in `state`, then for the view, refreshed, to show it."""
    until(lambda: call("GET", f"{hooks}/{hook}", key)[1]["state"] == state, f"the endpoint {state} by the API", timeout=60)
    by_id("webhooks-refresh").click()
    until(lambda: card().get_attribute("data-state") == state, f"the endpoint shown {state}")


def confirm(accept=True):
    alert = WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
    text = alert.text
    alert.accept() if accept else alert.dismiss()
    return text


def shot(name, element="webhooks-title"):
    driver.execute_script(f"document.getElementById('{element}').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, name))


try:
    status, made = call("POST", "/v1/apps", admin, {"name": "Shop", "bundle_id": "com.example.shop"})
    assert status == 201, made
    app, key = made["app"]["id"], made["api_key"]
    assert call("POST", f"/v1/apps/{app}/devices", key, {"token": "ab" * 32, "platform": "ios", "tags": ["vip"]})[0] == 200
    hooks = f"/v1/apps/{app}/webhooks"

    step("sign in with the app's key; the Webhooks view has no endpoint yet and offers the sandbox's receiver")
    driver.get(base + "/console")
    until(lambda: by_id("signin-key").is_displayed(), "the sign-in form")
    typed("signin-key", key)
    by_id("signin-form").submit()
    until(lambda: by_id("f-title").is_displayed(), "the compose view")
    driver.find_element(By.CSS_SELECTOR, '#nav a[data-view="webhooks"]').click()
    until(lambda: by_id("webhooks-empty").is_displayed(), "the empty list")
    assert by_id("wh-use-sandbox").is_displayed() and not by_id("wh-sandbox").is_displayed()
    boxes = driver.find_elements(By.CSS_SELECTOR, "#wh-events input[type=checkbox]")
    assert len(boxes) == 7 and all(b.is_selected() for b in boxes), [b.get_attribute("value") for b in boxes]

    step("an http URL is refused, named as the API names it, beside its field")
    typed("wh-url", "http://example.com/hooks")
    by_id("wh-add").click()
    until(lambda: "[https]" in by_id("wh-issues").text, "the refusal's rule")
    assert by_id("wh-url").get_attribute("aria-invalid") == "true"
    issue = by_id(by_id("wh-url").get_attribute("aria-describedby")).text
    assert "https" in issue, issue

    step("add an endpoint at the sandbox's receiver: its secret shown once, with a copy button")
    by_id("wh-url").clear()
    by_id("wh-use-sandbox").click()
    assert by_id("wh-url").get_attribute("value") == receiver, by_id("wh-url").get_attribute("value")
    for box in boxes:
        if box.get_attribute("value") not in ("delivery.delivered", "delivery.failed"):
            box.click()
    typed("wh-description", "Orders <b>backend</b>")
    typed("wh-batch", "50")
    by_id("wh-add").click()
    until(lambda: driver.find_elements(By.CSS_SELECTOR, "#wh-created .webhook-secret"), "the new secret")
    secret = driver.find_element(By.CSS_SELECTOR, "#wh-created .webhook-secret").text
    assert secret.startswith("whsec_"), secret
    assert "shown once" in by_id("wh-created").text, by_id("wh-created").text
    assert not driver.find_elements(By.CSS_SELECTOR, "#wh-url[aria-invalid]") and not by_id("wh-issues").text
    until(lambda: card().get_attribute("data-state") == "active", "the endpoint listed, active")
    hook = card().get_attribute("data-webhook")
    status, shown = call("GET", f"{hooks}/{hook}", key)
    assert status == 200 and shown["url"] == receiver and shown["events"] == ["delivery.delivered", "delivery.failed"] and shown["batch_size"] == 50, shown
    assert "secret" not in shown
    # The description is the server's text, shown as text: no element made of it.
    assert "Orders <b>backend</b>" in card().text and not card().find_elements(By.TAG_NAME, "b"), card().get_attribute("innerHTML")
    shown_facts = facts()
    assert shown_facts["Events"] == "delivery.delivered, delivery.failed" and shown_facts["Last success"] == "never", shown_facts
    assert shown_facts["Batch size"] == "50 events a request", shown_facts
    by_id("wh-created").find_element(By.CSS_SELECTOR, '[data-action="copy"]').click()
    until(lambda: by_id("wh-created").find_element(By.CSS_SELECTOR, "[role=status]").text, "the copy's answer")
    shot("webhooks-created.png", "wh-created")
    # The receiver checks signatures with the secret, as the app's backend would.
    assert call("POST", sandbox_admin + "/webhooks/secrets", body={"hook": "orders", "secret": secret})[0] == 200

    step("the secret is gone once the view is left")
    driver.find_element(By.CSS_SELECTOR, '#nav a[data-view="devices"]').click()
    driver.find_element(By.CSS_SELECTOR, '#nav a[data-view="webhooks"]').click()
    until(lambda: card().get_attribute("data-webhook") == hook, "the list again")
    assert not driver.find_elements(By.CSS_SELECTOR, "#wh-created *") and secret not in driver.page_source

    step("send a test: the receiver verified it and answered 200, in so many ms")
    action("test").click()
    until(lambda: card().find_element(By.CSS_SELECTOR, ".webhook-test").get_attribute("data-status") == "200", "the test's status")
    said = card().find_element(By.CSS_SELECTOR, ".webhook-test").text
    assert said.startswith("The receiver answered 200 in ") and said.endswith(" ms."), said
    _, got = call("GET", sandbox_admin + "/webhooks/received?hook=orders")
    last = got["requests"][-1]
    assert last["events"][0]["type"] == "webhook.test" and last["verified"] is True, last

    step("disable it, then enable it; the focus stays on the endpoint's button")
    action("disable").click()
    until(lambda: card().get_attribute("data-state") == "disabled", "the endpoint disabled")
    assert "Disabled" in card().text and "disabled by the app" in card().text, card().text
    assert driver.switch_to.active_element.get_attribute("data-action") == "enable"
    assert call("GET", f"{hooks}/{hook}", key)[1]["state"] == "disabled"
    shot("webhooks-disabled.png")
    action("enable").click()
    until(lambda: card().get_attribute("data-state") == "active", "the endpoint enabled")
    assert call("GET", f"{hooks}/{hook}", key)[1]["state"] == "active"
    assert driver.switch_to.active_element.get_attribute("data-action") == "disable"

    step("a receiver failing every request: a send's event makes the endpoint failing, with its last error and next attempt")
    assert call("POST", sandbox_admin + "/webhooks/mode", body={"fail": 1})[0] == 200
    status, sent = call("POST", f"/v1/apps/{app}/notifications", key, {"alert": {"title": "Order shipped"}, "audience": {"tag": "vip"}})
    assert status == 202, sent
    listed_as("failing")
    failing = call("GET", f"{hooks}/{hook}", key)[1]
    shown_error = card().find_element(By.CSS_SELECTOR, ".webhook-error").text
    assert failing["state"] == "failing" and failing["last_error"] == shown_error and "500" in shown_error, (failing, shown_error)
    why = card().find_element(By.CSS_SELECTOR, ".webhook-why").text
    assert "failed attempt" in why and "Next attempt" in why, why
    shot("webhooks-failing.png")

    step("the receiver mends; a replay of the last hour (the default range) is taken, and the endpoint is active again")
    assert call("POST", sandbox_admin + "/webhooks/mode", body={"fail": 0})[0] == 200
    start = driver.execute_script(f"return document.getElementById('webhook-{hook}-from').value")
    end = driver.execute_script(f"return document.getElementById('webhook-{hook}-to').value")
    assert start and end and start < end, (start, end)
    action("replay").click()
    until(lambda: card().find_elements(By.CSS_SELECTOR, ".webhook-replayed"), "the replay taken")
    listed_as("active")
    assert facts()["Last success"] != "never", facts()
    _, got = call("GET", sandbox_admin + "/webhooks/received?hook=orders")
    types = [e["type"] for r in got["requests"] for e in r["events"]]
    assert "delivery.delivered" in types and all(r["verified"] for r in got["requests"]), got["requests"]

    step("rotate the secret: the new one shown once, the previous one signing beside it")
    action("rotate").click()
    assert "shown once" in confirm()
    until(lambda: card().find_elements(By.CSS_SELECTOR, ".webhook-secret"), "the new secret")
    rotated = card().find_element(By.CSS_SELECTOR, ".webhook-secret").text
    assert rotated.startswith("whsec_") and rotated != secret
    assert "Previous secret" in facts() and driver.switch_to.active_element.get_attribute("data-action") == "copy"
    assert call("POST", sandbox_admin + "/webhooks/secrets", body={"hook": "orders", "secret": rotated})[0] == 200
    action("test").click()
    until(lambda: card().find_element(By.CSS_SELECTOR, ".webhook-test").get_attribute("data-status") == "200", "a test under the new secret")
    assert card().find_element(By.CSS_SELECTOR, ".webhook-secret").text == rotated  # a test does not take the secret away
    assert call("GET", sandbox_admin + "/webhooks/received?hook=orders")[1]["requests"][-1]["verified"] is True

    step("at phone width the view fits the window")
    driver.set_window_size(390, 844)
    time.sleep(0.3)
    wide = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert wide <= 0, f"the phone-width page is {wide} px wider than the window"
    shot("webhooks-phone.png")
    driver.set_window_size(1280, 900)

    step("delete it: nothing happens without the confirmation, then it is gone")
    action("delete").click()
    assert receiver in confirm(accept=False)
    assert call("GET", f"{hooks}/{hook}", key)[0] == 200
    action("delete").click()
    confirm()
    until(lambda: by_id("webhooks-empty").is_displayed(), "the empty list")
    assert call("GET", f"{hooks}/{hook}", key)[0] == 404
    assert driver.switch_to.active_element.get_attribute("id") == "webhooks-heading"
    print("webhooks browser test: every step passed", flush=True)
finally:
    driver.quit()
