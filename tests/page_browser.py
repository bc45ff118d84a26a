"""Drives `hearth serve`'s chat page in headless Chromium (Debian's, through its ChromeDriver):
a prompt from the address streams its answer with the thinking folded, the model's name and
tokens/s shown; then a prompt typed with tools offered and a call required shows the call.
With IMAGE (a model with vision): the image is picked, shown, and sent with a typed prompt.
Saves a screenshot. Usage: page_browser.py BASE_URL SCREENSHOT.png [IMAGE]"""

import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

base_url, screenshot = sys.argv[1], sys.argv[2]
image = sys.argv[3] if len(sys.argv) > 3 else None
options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1100,800"]:
    options.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def answers(n):
    """Waits until n answers have finished; returns the assistant turns."""
    WebDriverWait(driver, 120).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn.assistant[data-done]")) >= n)
    return driver.find_elements(By.CSS_SELECTOR, ".turn.assistant")


def image_flow():
    driver.get(base_url + "/?max_tokens=8")
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "model").text == "tiny")
    driver.find_element(By.ID, "file").send_keys(image)
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#attached img"))
    check(len(driver.find_elements(By.CSS_SELECTOR, "#attached img")) == 1, "the picked image is shown")
    box = driver.find_element(By.ID, "prompt")
    box.send_keys("What is this?")
    box.send_keys(Keys.ENTER)
    turn = answers(1)[0]
    check(not turn.find_elements(By.CSS_SELECTOR, ".error"), turn.text)
    check(turn.get_attribute("data-tokens") == "8", turn.get_attribute("data-tokens"))
    shown = driver.find_elements(By.CSS_SELECTOR, ".turn.user img")
    check(len(shown) == 1 and int(shown[0].get_property("naturalWidth")) == 70,
          "the user's turn shows the image (the page's policy lets data: images load)")
    check(not driver.find_elements(By.CSS_SELECTOR, "#attached img"), "sent images leave the tray")
    driver.save_screenshot(screenshot)


def text_flow():
    driver.get(base_url + "/?prompt=Hello%20there&max_tokens=8")
    turn = answers(1)[0]
    check(driver.find_element(By.ID, "model").text == "tiny", driver.find_element(By.ID, "model").text)
    check(driver.find_element(By.CSS_SELECTOR, ".turn.user .text").text == "Hello there", "the user's turn")
    thinking = turn.find_elements(By.CSS_SELECTOR, "details.thinking")
    check(thinking and thinking[0].get_attribute("open") is None, "the thinking is there, folded")
    check(thinking[0].find_element(By.TAG_NAME, "pre").get_attribute("textContent"), "the thinking has text")
    check(turn.get_attribute("data-tokens") == "8", turn.get_attribute("data-tokens"))
    rate = driver.find_element(By.ID, "rate").text
    check("8 tokens" in rate and "tokens/s" in rate, rate)

    # Tools offered, a call required, thinking off, the prompt typed and sent with Enter.
    driver.find_element(By.CSS_SELECTOR, "#settings summary").click()
    driver.find_element(By.ID, "tools").send_keys(json.dumps([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                              "required": ["city"]}}}]))
    driver.find_element(By.CSS_SELECTOR, "#choice option[value=required]").click()
    # Thinking off: a random model would think until its last token.
    driver.find_element(By.ID, "think").click()
    driver.find_element(By.ID, "max").clear()
    driver.find_element(By.ID, "max").send_keys("64")
    box = driver.find_element(By.ID, "prompt")
    box.send_keys("Weather in Paris?")
    box.send_keys(Keys.ENTER)
    turn = answers(2)[1]
    calls = turn.find_elements(By.CSS_SELECTOR, ".call")
    check(calls and calls[0].find_element(By.CSS_SELECTOR, ".name").text == "get_weather", turn.text)
    args = json.loads(calls[0].find_element(By.TAG_NAME, "pre").get_attribute("textContent"))
    check(isinstance(args.get("city"), str), args)
    check(not turn.find_elements(By.CSS_SELECTOR, ".error"), turn.text)
    driver.save_screenshot(screenshot)


try:
    if image:
        image_flow()
    else:
        text_flow()
finally:
    driver.quit()
print(f"chat page: {checks} checks passed; screenshot {screenshot}")
