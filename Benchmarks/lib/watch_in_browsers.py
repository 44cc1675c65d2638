"""Holds WATCHERS tabs of the console in headless Chromium, each signed in and, once the notification exists,
showing its live view (the funnel, the counts over time, the opens), as many people watching a send would.

    python3 watch_in_browsers.py BASE KEY APP WATCHERS

A browser opens at most six HTTP/1.1 connections to one server, and each live view holds one open: one browser
with fifty tabs would show six views and queue the rest. So the tabs are spread over browsers of their own (their
own profile and connections), five tabs each: ten browsers for fifty views.

Opens the tabs on the Sent view and prints "ready N" (the tabs signed in); then reads a notification id from
standard input, turns every tab to it, prints "watching N" once it has found each tab's funnel chart drawn, and
keeps them open until standard input closes. Used by Benchmarks/insight_watchers.sh with BROWSERS=1."""
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

base, key, app, watchers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
per_browser = 5


def browser():
    options = webdriver.ChromeOptions()
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"]:
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


drivers = []
try:
    tabs = []  # (driver, window handle)
    for i in range(watchers):
        if i % per_browser == 0:
            drivers.append(browser())
        else:
            drivers[-1].switch_to.new_window("tab")
        driver = drivers[-1]
        driver.get(base + "/console")
        # Each tab signs in as a person would have (the console keeps the key for the tab only).
        driver.execute_script("sessionStorage.setItem('richpush.key', arguments[0]); sessionStorage.setItem('richpush.app', arguments[1])", key, app)
        driver.get(base + "/console#notifications")
        driver.refresh()  # the key is read when the page loads; a change of the hash alone keeps the page
        # Every tab of a browser turns to the notification as soon as one of them names it (localStorage is the
        # origin's, shared by the browser's tabs): switching to each tab in turn would take longer than the send.
        driver.execute_script("""setInterval(() => {
            const id = localStorage.getItem('bench.watch');
            if (id && location.hash !== '#n/' + id) location.hash = 'n/' + id;
        }, 250)""")
        tabs.append((driver, driver.current_window_handle))
    signed_in = 0
    for driver, handle in tabs:
        driver.switch_to.window(handle)
        signed_in += bool(driver.execute_script("return !document.getElementById('view-notifications').hidden"))
    print(f"ready {signed_in}", flush=True)
    notification = sys.stdin.readline().strip()
    for driver in drivers:
        driver.execute_script("localStorage.setItem('bench.watch', arguments[0])", notification)
    drawn = 0
    for driver, handle in tabs:
        driver.switch_to.window(handle)
        deadline = time.time() + 30
        while time.time() < deadline:
            if driver.execute_script("return document.querySelectorAll('#funnel-chart .funnel-stage').length > 0"):
                drawn += 1
                break
            time.sleep(0.2)
        else:
            print("a tab without the view:", driver.execute_script("return location.hash + ' ' + document.querySelector('main').innerText.slice(0, 120)"), flush=True)
    print(f"watching {drawn}", flush=True)
    sys.stdin.read()
finally:
    for driver in drivers:
        driver.quit()
