"""The console in real headless Chromium (Debian's chromium and chromium-driver, driven with Selenium) against a real
`richpush serve` in sandbox mode. Run by ConsoleBrowserTests:

    python3 console_test.py BASE_URL ADMIN_KEY RICHPUSH_BINARY SCREENSHOT_DIR

Signs in, creates an app, composes a message with an uploaded image and a chart, sees a validation error appear and
go, sees the preflight verdict for a refused URL and what the server fetches for a URL in capitals, test-sends to a
registered device and reads what the simulated iPhone attached, sends to a tag and watches the outcome reach
delivered. Checks that the preview's chart image is byte-identical to `richpush chart` for the same spec and that the
"What is sent" tab equals `richpush payload` for the message as sent. Writes screenshots (compose and preview, light
and dark, desktop and phone width). Prints one line per step; exits non-zero at the first failure."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

base, admin, richpush, shots = sys.argv[1:5]
os.makedirs(shots, exist_ok=True)
work = tempfile.mkdtemp(prefix="console-browser-")


def step(text):
    print("step:", text, flush=True)


def png(width, height):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + b"".join(bytes([(x * 255) // width, (y * 255) // height, 180]) for x in range(width)) for y in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# A web page where a picture should be: the preflight must refuse it.
class Page(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<html><body>not a picture</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


page_server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
threading.Thread(target=page_server.serve_forever, daemon=True).start()
page_url = f"http://127.0.0.1:{page_server.server_address[1]}/sale.jpg"


def call(method, path, key, body=None):
    request = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


options = webdriver.ChromeOptions()
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800", "--force-device-scale-factor=1"]:
    options.add_argument(flag)
options.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_window_size(1280, 800)
wait = WebDriverWait(driver, 30)
by_id = lambda i: driver.find_element(By.ID, i)


def until(condition, what, timeout=30):
    # The console re-renders panels as the server's checks come back: an element found a moment ago may be gone.
    try:
        return WebDriverWait(driver, timeout, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(lambda d: condition())
    except Exception:
        driver.save_screenshot(os.path.join(shots, "failure.png"))
        raise AssertionError(f"timed out waiting for {what}")


def text_of(i):
    """The element's text, found again if the console re-rendered it meanwhile."""
    return until(lambda: by_id(i).text, f"the text of #{i}")


def typed(i, text):
    e = by_id(i)
    e.clear()
    e.send_keys(text)


try:
    step("the first screen asks for a key, with labels")
    driver.get(base + "/console")
    until(lambda: by_id("signin-key").is_displayed(), "the sign-in form")
    assert driver.find_element(By.CSS_SELECTOR, "label[for=signin-key]").text.startswith("API key")
    # Signed out, the page is the form alone: no sections to go to, no sign-out (a CSS rule once showed them).
    assert not by_id("nav").is_displayed() and not by_id("signout").is_displayed()
    csp = urllib.request.urlopen(base + "/console").headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp, csp

    step("sign in with the admin key and create an app")
    typed("signin-key", admin)
    by_id("signin-form").submit()
    until(lambda: driver.find_elements(By.ID, "new-name"), "the create-app form")
    typed("new-name", "Shop")
    typed("new-bundle", "com.example.shop")
    by_id("create-app").submit()
    until(lambda: driver.find_elements(By.CSS_SELECTOR, ".secret"), "the app's key")
    key = driver.find_element(By.CSS_SELECTOR, ".secret").text
    assert key.startswith("rp_"), key
    driver.find_element(By.XPATH, "//button[text()='Continue']").click()
    app = json.loads(driver.execute_script("return JSON.stringify({id: sessionStorage.getItem('richpush.app')})"))["id"]
    ios_token = "ab" * 32
    assert call("POST", f"/v1/apps/{app}/devices", key, {"token": ios_token, "platform": "ios", "tags": ["vip"]})[0] == 200
    driver.get(base + "/console#compose")
    until(lambda: by_id("f-title").is_displayed(), "the compose form")
    assert by_id("nav").is_displayed()

    step("the empty form shows no error before anything is typed")
    time.sleep(1.5)  # the first check (a dry run) has answered
    assert not driver.find_elements(By.CSS_SELECTOR, "#compose .field-issue"), text_of("issues")
    assert not driver.find_elements(By.CSS_SELECTOR, "#issues .sev-error"), text_of("issues")

    step("compose: text, an uploaded picture, a chart")
    typed("f-title", "Flash sale")
    typed("f-body", "40% off everything until midnight")
    picture = os.path.join(work, "sale.png")
    with open(picture, "wb") as f:
        f.write(png(120, 80))
    by_id("f-file").send_keys(picture)
    until(lambda: "/media/" in by_id("f-media").get_attribute("value"), "the upload's hosted URL")
    until(lambda: "iOS attaches it as a PNG" in by_id("preflight").text, "the upload's preflight verdict")
    Select(by_id("f-chart-type")).select_by_visible_text("bar")
    typed("f-chart-values", "12, 18, 9, 22, 30")
    typed("f-chart-labels", "Mon, Tue, Wed, Thu, Fri")
    Select(by_id("f-audience")).select_by_value("tag")
    typed("f-audience-value", "vip")
    until(lambda: "Reaches 1 device" in by_id("reach").text, "the audience's count")
    until(lambda: driver.find_elements(By.ID, "chart-preview"), "the chart preview")
    until(lambda: "No problems found" in by_id("issues").text, "a clean check")

    step("a validation error appears beside its field and goes")
    driver.find_element(By.CSS_SELECTOR, "details summary").click()
    typed("f-collapse", "x" * 80)
    until(lambda: by_id("f-collapse").get_attribute("aria-invalid") == "true", "collapse_id marked invalid")
    assert "collapse_id" in text_of("issues")
    typed("f-collapse", "sale-1")
    until(lambda: by_id("f-collapse").get_attribute("aria-invalid") is None and "No problems found" in by_id("issues").text, "the error gone")

    step("the chart preview is the bytes `richpush chart` draws")
    chart_url = by_id("chart-preview").get_attribute("src")
    served = urllib.request.urlopen(chart_url).read()
    spec = os.path.join(work, "chart.json")
    with open(spec, "w") as f:
        json.dump({"type": "bar", "values": [12, 18, 9, 22, 30], "labels": ["Mon", "Tue", "Wed", "Thu", "Fri"]}, f)
    subprocess.run([richpush, "chart", spec, "--out", os.path.join(work, "chart.png")], check=True, capture_output=True)
    with open(os.path.join(work, "chart.png"), "rb") as f:
        drawn = f.read()
    assert served == drawn, f"chart preview {len(served)} bytes, richpush chart {len(drawn)} bytes"

    step("the 'What is sent' tab is `richpush payload` for the message as sent")
    by_id("tab-sent").click()
    # Leaving a field sends a new dry run: read the panel once it has settled, both parts in one snapshot, and
    # check that they come from one dry run (each carries its run's id; a console that mixed two runs failed here).
    snapshot = """
        const panel = document.getElementById("panel-sent");
        const apns = document.getElementById("sent-apns"), message = document.getElementById("sent-message");
        if (!panel || panel.getAttribute("aria-busy") || !apns || !message) return null;
        return {tag: panel.dataset.dryRun, apnsTag: apns.dataset.dryRun, messageTag: message.dataset.dryRun,
                apns: apns.textContent, message: message.textContent};
    """
    sent = until(lambda: driver.execute_script(snapshot), "the APNs request, settled")
    assert sent["tag"] and sent["tag"] == sent["apnsTag"] == sent["messageTag"], sent
    shown = json.loads(sent["apns"])
    sent_message = json.loads(sent["message"])
    assert shown["payload"]["rp"]["id"] == sent_message["id"] == sent["tag"], (shown["payload"]["rp"]["id"], sent_message["id"], sent["tag"])
    message = os.path.join(work, "message.json")
    with open(message, "w") as f:
        json.dump(sent_message, f)
    out = subprocess.run([richpush, "payload", "--provider", "apns", "--token", ios_token, "--bundle-id", "com.example.shop", "--json", "--allow-http", message],
                         check=True, capture_output=True, text=True).stdout
    printed = json.loads(out)
    assert shown["payload"] == printed["body"], (shown["payload"], printed["body"])
    assert {k: v for k, v in shown["headers"].items() if k != "apns-expiration"} == {k: v for k, v in printed["headers"].items() if k != "apns-expiration"}, (shown["headers"], printed["headers"])
    by_id("tab-ios").click()

    step("screenshots: compose and preview, light and dark, desktop and phone")
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "compose-light-desktop.png"))
    by_id("theme").click()
    driver.save_screenshot(os.path.join(shots, "compose-dark-desktop.png"))
    by_id("tab-android").click()
    driver.save_screenshot(os.path.join(shots, "android-dark-desktop.png"))
    by_id("theme").click()
    by_id("tab-ios").click()
    driver.set_window_size(390, 844)
    time.sleep(0.3)
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.2)
    wide = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    if wide > 0:
        culprits = driver.execute_script("""const w = document.documentElement.clientWidth; const out = [];
            for (const e of document.querySelectorAll('*')) { const r = e.getBoundingClientRect(); if (r.right > w + 1 && r.width > 0) out.push(e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(r.width)); }
            return out.slice(0, 12).join(', ')""")
        raise AssertionError(f"the phone-width page is {wide} px wider than the window: {culprits}")
    driver.save_screenshot(os.path.join(shots, "compose-light-phone.png"))
    driver.execute_script("document.getElementById('preview-title').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "preview-light-phone.png"))
    by_id("theme").click()
    driver.execute_script("document.getElementById('preview-title').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "preview-dark-phone.png"))
    by_id("theme").click()
    driver.set_window_size(1280, 800)

    step("the preflight refuses a web page where a picture should be")
    saved_media = by_id("f-media").get_attribute("value")
    typed("f-media", page_url)
    until(lambda: "Refused" in by_id("preflight").text and "not-media" in by_id("preflight").text, "the refusal")
    typed("f-media", saved_media)
    until(lambda: "iOS attaches it" in by_id("preflight").text, "the picture's verdict again")

    step("the server reads the URL: a scheme and host in capitals are fetched in lower case, user information is refused")
    scheme, rest = saved_media.split("://", 1)
    host, path = rest.split("/", 1)
    typed("f-media", f"{scheme.upper()}://{host.upper()}/{path}")
    until(lambda: f"Fetched and sent as {saved_media}" in by_id("preflight").text
          and "iOS attaches it" in by_id("preflight").text, "the URL as fetched")
    typed("f-media", f"{scheme}://user:secret@{rest}")
    until(lambda: "Refused" in by_id("preflight").text and "url-user-info" in by_id("preflight").text,
          "the refusal of user information")
    typed("f-media", saved_media)
    until(lambda: "iOS attaches it" in by_id("preflight").text and "Fetched" not in by_id("preflight").text,
          "the picture's verdict again")

    step("test send: the simulated iPhone attaches the picture")
    typed("f-test-token", ios_token)
    by_id("test-send").click()
    until(lambda: driver.find_elements(By.CSS_SELECTOR, "#simulated .attachment"), "the simulated iPhone's attachments", timeout=60)
    assert "delivered" in text_of("test-outcome")
    attached = driver.find_elements(By.CSS_SELECTOR, "#simulated .attachment")
    assert len(attached) >= 1, text_of("simulated")
    driver.execute_script("document.getElementById('simulated').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "test-send.png"))

    step("send to the tag (after confirming the count) and watch the outcome reach delivered")
    by_id("send").click()
    alert = WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
    assert "1 device now registered" in alert.text, alert.text
    alert.accept()
    until(lambda: driver.current_url.split("#")[-1].startswith("n/"), "the notification's page")
    until(lambda: driver.find_element(By.CSS_SELECTOR, '#counts [data-state="delivered"] b').text == "1", "delivered 1", timeout=60)
    until(lambda: "Flash sale" in by_id("notification-title").text, "the notification's title as its heading")
    assert by_id("notification-sent").text.startswith("Sent "), by_id("notification-sent").text
    headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#deliveries th")]
    assert "Changed" in headers and "Next try" in headers, headers
    # No device has opened it yet: the opens chart says so instead of an empty box.
    assert driver.find_elements(By.CSS_SELECTOR, "#opens-chart [data-empty]"), "the empty opens chart says nothing yet"
    driver.save_screenshot(os.path.join(shots, "outcomes.png"))

    step("update it in place: the next version goes to the same device and is followed to delivered")
    first_url = driver.current_url
    by_id("update-in-place").click()
    until(lambda: by_id("updating").is_displayed() and by_id("send").text == "Send the update", "the update banner")
    assert first_url.split("#n/")[-1] in by_id("updating-text").text, by_id("updating-text").text
    typed("f-title", "Sale: the last hours")
    by_id("send").click()
    alert = WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
    assert "next version" in alert.text, alert.text
    alert.accept()
    until(lambda: driver.current_url != first_url and driver.current_url.split("#")[-1].startswith("n/"), "the update's page")
    until(lambda: driver.find_element(By.CSS_SELECTOR, '#counts [data-state="delivered"] b').text == "1", "the update delivered", timeout=60)
    until(lambda: "version 1, the newest 1" in by_id("notification-version").text, "the version shown")
    driver.execute_script("document.getElementById('notification-title').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "update-in-place.png"))
    driver.get(base + "/console#compose")
    until(lambda: not by_id("updating").is_displayed() and by_id("send").text == "Send", "the compose form back to new sends")

    step("the sent list holds both notifications")
    driver.get(base + "/console#notifications")
    until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#notifications-list tbody tr")) >= 2, "the list")

    step("the app page lists the push services its sends went to, each circuit closed")
    driver.get(base + "/console#app")
    until(lambda: driver.find_elements(By.CSS_SELECTOR, "#push-services tbody tr"), "the push services panel")
    rows = driver.find_elements(By.CSS_SELECTOR, "#push-services tbody tr")
    served = {r.find_elements(By.TAG_NAME, "td")[0].text: r.get_attribute("data-state") for r in rows}
    assert any(o.startswith("https://127.0.0.1:") for o in served) and set(served.values()) == {"closed"}, served
    listed = call("GET", f"/v1/apps/{app}/push-services", key)[1]["push_services"]
    assert sorted(s["origin"] for s in listed) == sorted(served), (listed, served)
    driver.execute_script("document.getElementById('push-services').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "push-services.png"))

    step("keyboard: the preview's tabs move with the arrow keys")
    driver.get(base + "/console#compose")
    until(lambda: by_id("tab-ios").is_displayed(), "the tabs")
    by_id("tab-ios").click()
    from selenium.webdriver.common.keys import Keys
    by_id("tab-ios").send_keys(Keys.ARROW_RIGHT)
    until(lambda: by_id("tab-android").get_attribute("aria-selected") == "true" and not by_id("panel-android").get_attribute("hidden"), "the Android tab")

    step("a Live Activity: the Lock Screen card, the liveactivity request, a start → update → end series delivered")
    driver.get(base + "/console#compose")
    driver.refresh()  # a fresh form: the same address keeps the page
    until(lambda: by_id("f-title").is_displayed(), "the compose form")
    by_id("tab-ios").click()
    for field in ["f-media", "f-chart-labels", "f-collapse"]:
        driver.execute_script(f"document.getElementById('{field}').value = ''")
    live_token = "cd" * 32
    typed("f-title", "Order A-17")
    typed("f-body", "We are preparing it")
    Select(by_id("f-chart-type")).select_by_visible_text("sparkline")
    typed("f-chart-values", "25, 22, 18")
    Select(by_id("f-audience")).select_by_value("apns_tokens")
    typed("f-audience-value", live_token)
    Select(by_id("f-live-event")).select_by_visible_text("start")
    typed("f-live-state", '{"status": "preparing", "eta_minutes": 25}')
    typed("f-live-type", "DeliveryAttributes")
    typed("f-live-attributes", '{"order": "A-17"}')
    until(lambda: by_id("live-card").get_attribute("data-event") == "start" and "preparing" in by_id("live-card").text, "the Lock Screen card")
    until(lambda: "No problems found" in by_id("issues").text, "a clean check of the start")
    until(lambda: driver.find_elements(By.CSS_SELECTOR, "#live-card #chart-preview"), "the chart in the card")
    by_id("tab-sent").click()
    shown = json.loads(until(lambda: driver.execute_script(
        "const p = document.getElementById('panel-sent'); const a = document.getElementById('sent-apns');"
        "return p && !p.getAttribute('aria-busy') && a ? a.textContent : null"), "the liveactivity request"))
    assert shown["headers"]["apns-push-type"] == "liveactivity", shown["headers"]
    assert shown["headers"]["apns-topic"] == "com.example.shop.push-type.liveactivity", shown["headers"]
    aps = shown["payload"]["aps"]
    assert aps["event"] == "start" and aps["attributes-type"] == "DeliveryAttributes" and aps["content-state"]["chart"]["values"] == [25, 22, 18], aps
    by_id("tab-ios").click()
    driver.execute_script("document.getElementById('preview-title').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "live-start.png"))
    by_id("live-add").click()
    Select(by_id("f-live-event")).select_by_visible_text("update")
    typed("f-live-type", "")
    typed("f-live-attributes", "")
    typed("f-live-state", '{"status": "on its way", "eta_minutes": 12}')
    typed("f-body", "Arriving in 12 minutes")
    until(lambda: "No problems found" in by_id("issues").text and by_id("live-card").get_attribute("data-event") == "update", "a clean update")
    by_id("live-add").click()
    Select(by_id("f-live-event")).select_by_visible_text("end")
    typed("f-live-state", '{"status": "delivered", "eta_minutes": 0}')
    typed("f-body", "Enjoy your meal")
    until(lambda: "No problems found" in by_id("issues").text and by_id("live-card").get_attribute("data-event") == "end", "a clean end")
    by_id("live-add").click()
    until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#live-series li")) == 3, "three states in the series")
    by_id("live-send").click()
    until(lambda: len(driver.find_elements(By.CSS_SELECTOR, '#live-outcomes li[data-state="delivered"]')) == 3, "the three states delivered", timeout=60)
    events = [li.get_attribute("data-event") for li in driver.find_elements(By.CSS_SELECTOR, "#live-outcomes li")]
    assert events == ["start", "update", "end"], events
    driver.execute_script("document.getElementById('live').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "live-series.png"))
    by_id("theme").click()
    driver.execute_script("document.getElementById('preview-title').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "live-end-dark.png"))
    by_id("theme").click()

    step("the admin's list of apps, and an app deleted after its name is typed")
    status, made = call("POST", "/v1/apps", admin, {"name": "Throwaway", "bundle_id": "com.example.throwaway"})
    assert status == 201, made
    gone_id = made["app"]["id"]
    driver.get(base + "/console#app")
    until(lambda: by_id("switch-app").is_displayed(), "the app page")
    by_id("switch-app").click()
    until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#apps tbody tr")) == 2, "two apps listed")
    driver.find_element(By.CSS_SELECTOR, f'#apps tr[data-app="{gone_id}"] button').click()
    until(lambda: "Throwaway" in by_id("who").text, "the chosen app")
    driver.get(base + "/console#app")
    until(lambda: driver.find_elements(By.ID, "delete-app"), "the delete form")
    typed("delete-name", "Throwaw")
    by_id("delete-app").submit()
    until(lambda: "exactly" in by_id("delete-error").text, "a wrong name refused")
    assert call("GET", f"/v1/apps/{gone_id}", admin)[0] == 200
    typed("delete-name", "Throwaway")
    by_id("delete-app").submit()
    until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#apps tbody tr")) == 1, "the list without it")
    assert call("GET", f"/v1/apps/{gone_id}", admin)[0] == 404
    print("console browser test: every step passed", flush=True)
finally:
    driver.quit()
    page_server.shutdown()
