"""The console's live funnel in real headless Chromium against a real `richpush serve`. Run by ConsoleBrowserTests,
which sends to 1,000 devices and then, while this script watches, posts the devices' reports and the app library's
opens:

    python3 funnel_test.py BASE_URL KEY APP_ID NOTIFICATION_ID EXPECTED_JSON SCREENSHOT_DIR

Signs in, opens the notification, prints "watching" once the funnel chart is drawn, then waits (without reloading)
until every stage of the chart shows the expected count, having seen the numbers change on the way. Checks the
opens chart and the over-time chart agree, and takes screenshots (light and dark, desktop and phone width)."""
import json
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, key, app, notification, expected, shots = sys.argv[1:7]
expected = json.loads(expected)
# What the app's own view must show once the funnel is done (the stages are the rest).
app_view = expected.pop("app", {})
os.makedirs(shots, exist_ok=True)

options = webdriver.ChromeOptions()
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900", "--force-device-scale-factor=1"]:
    options.add_argument(flag)
options.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_window_size(1280, 900)


def step(text):
    print("step:", text, flush=True)


def until(condition, what, timeout=30):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(lambda d: condition())
    except Exception:
        driver.save_screenshot(os.path.join(shots, "funnel-failure.png"))
        raise AssertionError(f"timed out waiting for {what}; the chart shows {chart_counts()}")


def chart_counts():
    return driver.execute_script("""const out = {};
        for (const g of document.querySelectorAll('#funnel-chart .funnel-stage')) out[g.dataset.stage] = Number(g.dataset.count);
        return out""")


try:
    step("sign in and open the notification")
    driver.get(base + "/console")
    until(lambda: driver.execute_script("const e = document.getElementById('signin-key'); return e && e.offsetParent !== null"), "the sign-in form")
    driver.find_element(By.ID, "signin-key").send_keys(key)
    driver.find_element(By.ID, "signin-app").send_keys(app)
    driver.find_element(By.ID, "signin-form").submit()
    until(lambda: driver.execute_script("return !!sessionStorage.getItem('richpush.key')"), "signing in")
    driver.get(base + "/console#n/" + notification)
    until(lambda: chart_counts().get("accepted") == expected["accepted"], "the funnel chart")
    driver.execute_script("window.__loadedOnce = true")
    first = chart_counts()
    print("watching", json.dumps(first), flush=True)

    step("the chart follows the reports and opens as they come, without a reload")
    seen = [first]
    deadline = time.time() + 240
    while time.time() < deadline:
        now = chart_counts()
        if now != seen[-1]:
            seen.append(now)
        if now == expected:
            break
        time.sleep(0.2)
    assert chart_counts() == expected, f"the chart shows {chart_counts()}, expected {expected}"
    assert driver.execute_script("return window.__loadedOnce === true"), "the page was reloaded"
    assert len(seen) >= 3, f"the chart changed only {len(seen) - 1} times while the reports came: {seen}"
    print("states seen:", len(seen), flush=True)

    step("the opens chart and the over-time chart agree with the funnel")
    opens = driver.execute_script("return [...document.querySelectorAll('#opens-chart .opens-bar')].reduce((a, b) => a + Number(b.dataset.count), 0)")
    assert opens == expected["opened"], opens
    until(lambda: driver.execute_script("const l = document.querySelector('#delivered-chart [data-series=opened]'); return l && Number(l.dataset.last)") == expected["opened"], "the over-time chart's opens")
    delivered = driver.execute_script("return Number(document.querySelector('#delivered-chart [data-series=delivered]').dataset.last)")
    assert delivered == expected["provider_accepted"], delivered
    notes = driver.find_element(By.ID, "funnel-notes").text
    assert "Dismissed" in notes, notes
    step("the deliveries, 100 at a time")
    def shown_targets():
        return driver.execute_script("return [...document.querySelectorAll('#deliveries tbody tr td:first-child')].map((t) => t.textContent)")
    until(lambda: len(shown_targets()) == 100, "the first 100 deliveries")
    first_page = shown_targets()
    driver.find_element(By.ID, "deliveries-next").click()
    until(lambda: "101 to 200" in driver.find_element(By.CSS_SELECTOR, "#deliveries caption").text, "the next 100")
    second_page = shown_targets()
    assert len(second_page) == 100 and not set(first_page) & set(second_page), (first_page[:3], second_page[:3])
    driver.find_element(By.ID, "deliveries-back").click()
    until(lambda: shown_targets() == first_page, "the first 100 again")

    if app_view.get("link"):
        until(lambda: app_view["link"] in driver.find_element(By.ID, "funnel-notes").text, "the deep link's opens in the notes")

    if app_view:
        step("the app's view: its hours, failures and devices by permission")
        # The hour's counts are written by the server every 2 s: the view is opened again until they are all in.
        def hour_sums():
            return driver.execute_script("""const out = {};
                for (const r of document.querySelectorAll('#hours-chart rect[data-kind]')) out[r.dataset.kind] = (out[r.dataset.kind] || 0) + Number(r.dataset.count);
                return out""")
        want = {"accepted": expected["accepted"], "delivered": expected["provider_accepted"], "opened": expected["opened"]}
        deadline = time.time() + 30
        while True:
            driver.execute_script("location.hash = 'compose'")
            time.sleep(0.2)
            driver.execute_script("location.hash = 'notifications'")
            try:
                until(lambda: hour_sums() == want, "the hours chart", timeout=3)
                break
            except AssertionError:
                if time.time() > deadline:
                    raise AssertionError(f"the hours chart shows {hour_sums()}, expected {want}")
        # An empty list or a missing button is left out, not written as "null".
        assert "null" not in [line.strip() for line in driver.find_element(By.TAG_NAME, "main").text.split("\n")]
        # The last devices report their permission after the last open (the opens come first, from the first 300):
        # the view is opened again until every device's report is in.
        def permissions_shown():
            text = driver.find_element(By.ID, "insights-permissions").text
            return all(f"{name} {n}" in text for name, n in app_view["permissions"].items())
        deadline = time.time() + 30
        while not permissions_shown():
            if time.time() > deadline:
                raise AssertionError(driver.find_element(By.ID, "insights-permissions").text)
            driver.execute_script("location.hash = 'compose'")
            time.sleep(0.2)
            driver.execute_script("location.hash = 'notifications'")
            try:
                until(permissions_shown, "the devices by permission", timeout=3)
            except AssertionError:
                pass
        assert "No failures" in driver.find_element(By.ID, "insights-failures").text
        driver.execute_script("document.getElementById('notifications-title').scrollIntoView()")
        time.sleep(0.2)
        driver.save_screenshot(os.path.join(shots, "insights-light-desktop.png"))
        driver.get(base + "/console#n/" + notification)
        until(lambda: chart_counts() == expected, "the funnel chart again")

    step("screenshots: light and dark, desktop and phone")
    driver.execute_script("document.getElementById('notification-title').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "funnel-light-desktop.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    time.sleep(0.3)
    background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(245, 246, 248)", background
    driver.save_screenshot(os.path.join(shots, "funnel-dark-desktop.png"))
    driver.set_window_size(390, 844)
    time.sleep(0.3)
    wide = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    if wide > 0:
        culprits = driver.execute_script("""const w = document.documentElement.clientWidth; const out = [];
            for (const e of document.querySelectorAll('*')) { const r = e.getBoundingClientRect(); if (r.right > w + 1 && r.width > 0) out.push(e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(r.width)); }
            return out.slice(0, 12).join(', ')""")
        raise AssertionError(f"the phone-width page is {wide} px wider than the window: {culprits}")
    driver.execute_script("document.getElementById('funnel-chart').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "funnel-dark-phone.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    time.sleep(0.3)
    driver.save_screenshot(os.path.join(shots, "funnel-light-phone.png"))
    print("funnel browser test: every step passed", flush=True)
except Exception as e:
    print("FAILED:", e, flush=True)
    try:
        logs = driver.get_log("browser")
        for entry in logs[-20:]:
            print("browser:", entry.get("message"), flush=True)
    except Exception:
        pass
    driver.quit()
    sys.exit(1)
driver.quit()
