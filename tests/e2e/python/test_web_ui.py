"""The web chat page in headless Chromium (Debian's chromium + chromium-driver, offline): it loads
the model name (a picker when several are served), streams a reply into the DOM as sanitized
Markdown, keeps the conversation, edits a message, stops a reply, escapes the user's HTML,
starts new chats and keeps the API key in localStorage. A screenshot goes to
$MNEMO_SCREENSHOT_DIR (default /tmp)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from helpers import API_KEY, chat_model_path, read_metrics, reference_model_path, wait_for

SCREENSHOT_DIR = os.environ.get("MNEMO_SCREENSHOT_DIR", "/tmp")

# Records every text the assistant bubbles show, to tell a streamed reply from one that appears whole.
RECORD_SNAPSHOTS = """
window.__snapshots = [];
const observer = new MutationObserver(() => {
  const bubbles = document.querySelectorAll('.message.assistant .content');
  if (bubbles.length) window.__snapshots.push(bubbles[bubbles.length - 1].dataset.raw || '');
});
observer.observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true, attributes: true});
"""


def find_program(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"none of {names} is installed (scripts/setup.sh installs Debian's chromium and chromium-driver)")


@pytest.fixture(scope="module")
def browser():
    options = Options()
    options.binary_location = find_program("chromium", "chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,760",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    service = Service(executable_path=find_program("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait(driver, timeout=60):
    return WebDriverWait(driver, timeout, poll_frequency=0.05)


def text_of(element) -> str:
    return element.get_attribute("textContent")


def open_page(driver, url: str, model_id: str | None, keep_conversation: bool = False):
    driver.get(url + "/")
    assert driver.title == "Mnemo chat"
    if not keep_conversation:  # the page keeps its conversation across loads: start from none
        driver.execute_script("localStorage.removeItem('mnemo.chat.history')")
        driver.refresh()
    if model_id is not None:
        wait(driver, 20).until(lambda d: text_of(d.find_element(By.ID, "model-name")) == model_id)


def raw_reply(bubble) -> str:
    """A reply's text as the API gave it (the bubble shows it rendered as Markdown)."""
    return bubble.find_element(By.CSS_SELECTOR, ".content").get_attribute("data-raw")


def set_setting(driver, element_id: str, value: str):
    if not driver.find_element(By.ID, "settings").is_displayed():
        driver.find_element(By.ID, "settings-toggle").click()
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value + Keys.TAB)  # TAB: the change event stores it


def assistant_bubbles(driver):
    return driver.find_elements(By.CSS_SELECTOR, ".message.assistant")


def send_message(driver, text: str, expect_count: int):
    box = driver.find_element(By.ID, "input")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait(driver, 10).until(lambda d: len(assistant_bubbles(d)) == expect_count)
    return assistant_bubbles(driver)[-1]


def wait_finished(driver, bubble, timeout=90) -> str:
    wait(driver, timeout).until(lambda d: bubble.get_attribute("data-state") != "streaming")
    return bubble.get_attribute("data-state")


def test_page_streams_a_multi_turn_chat(browser, server, client, model_id):
    open_page(browser, server.url, model_id)
    set_setting(browser, "temperature", "0")
    set_setting(browser, "max-tokens", "16")
    browser.find_element(By.ID, "settings-toggle").click()  # close the settings panel again
    browser.execute_script(RECORD_SNAPSHOTS)

    question = "What is the capital of France?"
    bubble = send_message(browser, question, 1)
    assert wait_finished(browser, bubble) == "done"
    reply = raw_reply(bubble)
    assert reply.strip()
    assert text_of(browser.find_element(By.ID, "status")) in ("", "Reply cut at the max tokens limit (see Settings).")
    # It arrived piece by piece: the bubble showed growing prefixes of the final text.
    snapshots = [s for s in browser.execute_script("return window.__snapshots") if s]
    assert all(reply.startswith(s) for s in snapshots)
    assert len(set(snapshots)) >= 2, snapshots
    # The page asked for what the settings say: the API gives the same greedy reply.
    # The page's default system prompt goes first (settings: "System prompt").
    system = {"role": "system", "content": "You are a helpful assistant."}
    expected = client.chat.completions.create(model=model_id, messages=[system, {"role": "user", "content": question}],
                                              temperature=0, max_tokens=16)
    assert reply == expected.choices[0].message.content

    follow_up = "And of Germany?"
    bubble2 = send_message(browser, follow_up, 2)
    assert wait_finished(browser, bubble2) == "done"
    reply2 = raw_reply(bubble2)
    expected2 = client.chat.completions.create(
        model=model_id, temperature=0, max_tokens=16,
        messages=[system, {"role": "user", "content": question}, {"role": "assistant", "content": reply},
                  {"role": "user", "content": follow_up}])
    assert reply2 == expected2.choices[0].message.content  # the whole history was sent
    users = [text_of(e) for e in browser.find_elements(By.CSS_SELECTOR, ".message.user .content")]
    assert users == [question, follow_up]

    path = os.path.join(SCREENSHOT_DIR, "mnemo-chat.png")
    assert browser.save_screenshot(path)
    assert os.path.getsize(path) > 10_000


def test_stop_button_cancels_the_reply(browser, server, model_id):
    open_page(browser, server.url, model_id)
    set_setting(browser, "max-tokens", "400")
    before = read_metrics(server.url)
    bubble = send_message(browser, "Write a very long story about a dragon and a knight.", 1)
    content = bubble.find_element(By.CSS_SELECTOR, ".content")
    wait(browser, 60).until(lambda d: len(text_of(content)) > 10)
    stop = browser.find_element(By.ID, "stop")
    assert stop.is_displayed()
    assert not browser.find_element(By.ID, "send").is_displayed()
    stop.click()
    assert wait_finished(browser, bubble, timeout=10) == "stopped"
    assert browser.find_element(By.ID, "send").is_displayed()
    wait_for(lambda: read_metrics(server.url)["mnemo_requests_cancelled_total"]
             == before["mnemo_requests_cancelled_total"] + 1, timeout=20, what="the server to cancel the request")
    after = read_metrics(server.url)
    assert after["mnemo_generation_tokens_total"] - before["mnemo_generation_tokens_total"] < 300
    set_setting(browser, "max-tokens", "16")


def test_html_is_escaped_and_new_chat_clears(browser, server, model_id):
    open_page(browser, server.url, model_id)
    set_setting(browser, "max-tokens", "2")
    text = "<b>bold</b> & <img src=x onerror=alert(1)>"
    bubble = send_message(browser, text, 1)
    wait_finished(browser, bubble)
    user = browser.find_element(By.CSS_SELECTOR, ".message.user .content")
    assert text_of(user) == text
    assert "&lt;b&gt;" in user.get_attribute("innerHTML")
    assert not browser.find_elements(By.CSS_SELECTOR, "#messages b, #messages img")

    browser.find_element(By.ID, "new-chat").click()
    assert not browser.find_elements(By.CSS_SELECTOR, ".message")
    assert browser.find_element(By.ID, "empty").is_displayed()
    set_setting(browser, "max-tokens", "16")


def test_the_conversation_survives_a_reload_and_the_last_reply_regenerates(browser, server, client, model_id):
    open_page(browser, server.url, model_id)
    set_setting(browser, "temperature", "0")
    set_setting(browser, "max-tokens", "8")
    browser.find_element(By.ID, "settings-toggle").click()
    assert not browser.find_element(By.ID, "regenerate").is_displayed()  # nothing to regenerate yet
    first = send_message(browser, "Name a colour.", 1)
    assert wait_finished(browser, first) == "done"
    reply = raw_reply(first)
    browser.refresh()
    wait(browser, 20).until(lambda d: len(assistant_bubbles(d)) == 1)
    assert raw_reply(assistant_bubbles(browser)[0]) == reply
    users = [text_of(e) for e in browser.find_elements(By.CSS_SELECTOR, ".message.user .content")]
    assert users == ["Name a colour."]
    # Regenerate: the last reply goes and comes again (greedy: the same text), one bubble each.
    regen = browser.find_element(By.ID, "regenerate")
    wait(browser, 10).until(lambda d: regen.is_displayed())
    regen.click()
    wait(browser, 10).until(lambda d: assistant_bubbles(d) and assistant_bubbles(d)[-1].get_attribute("data-state") != "done")
    again = assistant_bubbles(browser)[-1]
    assert wait_finished(browser, again) == "done"
    assert len(assistant_bubbles(browser)) == 1
    assert raw_reply(again) == reply
    saved = browser.execute_script("return JSON.parse(localStorage.getItem('mnemo.chat.history'))")
    assert [m["role"] for m in saved] == ["user", "assistant"]
    browser.find_element(By.ID, "new-chat").click()
    assert browser.execute_script("return localStorage.getItem('mnemo.chat.history')") is None


def test_a_server_that_cannot_be_reached_keeps_the_message(browser, start_server):
    doomed = start_server()
    open_page(browser, doomed.url, None)
    wait(browser, 20).until(lambda d: text_of(d.find_element(By.ID, "model-name")) not in ("", "connecting…"))
    doomed.terminate()
    box = browser.find_element(By.ID, "input")
    box.send_keys("Are you there?")
    browser.find_element(By.ID, "send").click()
    wait(browser, 30).until(lambda d: "cannot be reached" in text_of(d.find_element(By.ID, "status")))
    assert box.get_attribute("value") == "Are you there?"
    assert not browser.find_elements(By.CSS_SELECTOR, ".message")


def test_api_key_is_asked_for_and_kept(browser, auth_server):
    open_page(browser, auth_server.url, None)
    model = browser.find_element(By.ID, "model-name")
    wait(browser, 20).until(lambda d: text_of(model) == "API key needed")
    set_setting(browser, "api-key", API_KEY)
    wait(browser, 20).until(lambda d: text_of(model) not in ("API key needed", "connecting…"))
    model_id = text_of(model)
    assert model_id and model_id != "model unknown"
    assert browser.execute_script("return localStorage.getItem('mnemo.chat.apiKey')") == API_KEY
    browser.refresh()
    wait(browser, 20).until(lambda d: text_of(d.find_element(By.ID, "model-name")) == model_id)
    browser.execute_script("localStorage.clear()")


MARKDOWN = ("Here is **bold** and `code`:\n\n- one\n- two\n\n```\nx = 1\n```\n\n[safe](https://example.org) "
            "[evil](javascript:window.__pwned=3) <img src=x onerror=\"window.__pwned=1\"> "
            "<script>window.__pwned=2</script><b onclick=\"window.__pwned=4\">b</b>")


def restore_conversation(driver, url: str, model_id: str, history: list[dict]):
    driver.get(url + "/")
    driver.execute_script("localStorage.setItem('mnemo.chat.history', arguments[0])", json.dumps(history))
    driver.refresh()
    wait(driver, 20).until(lambda d: text_of(d.find_element(By.ID, "model-name")) == model_id)


def test_replies_render_as_sanitized_markdown(browser, server, model_id):
    restore_conversation(browser, server.url, model_id,
                         [{"role": "user", "content": "**not markdown** <i>x</i>"}, {"role": "assistant", "content": MARKDOWN}])
    reply = browser.find_element(By.CSS_SELECTOR, ".message.assistant .content")
    assert text_of(reply.find_element(By.CSS_SELECTOR, "strong")) == "bold"
    assert text_of(reply.find_element(By.CSS_SELECTOR, "p code")) == "code"
    assert [text_of(li) for li in reply.find_elements(By.CSS_SELECTOR, "li")] == ["one", "two"]
    assert text_of(reply.find_element(By.CSS_SELECTOR, "pre code")).strip() == "x = 1"
    links = {text_of(a): a.get_attribute("href") for a in reply.find_elements(By.CSS_SELECTOR, "a")}
    assert links["safe"] == "https://example.org/"
    assert not (links.get("evil") or "").startswith("javascript:")
    assert reply.find_element(By.CSS_SELECTOR, "a").get_attribute("rel") == "noopener noreferrer"
    # No image, script or handler survives, and none ran.
    assert not reply.find_elements(By.CSS_SELECTOR, "img, script, [onclick], [onerror]")
    for b in reply.find_elements(By.CSS_SELECTOR, "b"):
        b.click()
    assert browser.execute_script("return window.__pwned") is None
    assert raw_reply(browser.find_element(By.CSS_SELECTOR, ".message.assistant")) == MARKDOWN
    # The user's own message stays text.
    user = browser.find_element(By.CSS_SELECTOR, ".message.user .content")
    assert text_of(user) == "**not markdown** <i>x</i>"
    assert not user.find_elements(By.CSS_SELECTOR, "strong, i")


def test_edit_takes_a_message_back_and_drops_the_turns_after_it(browser, server, client, model_id):
    history = [{"role": "user", "content": "First question"}, {"role": "assistant", "content": "First answer"},
               {"role": "user", "content": "Second question"}, {"role": "assistant", "content": "Second answer"}]
    restore_conversation(browser, server.url, model_id, history)
    edits = browser.find_elements(By.CSS_SELECTOR, ".message.user button.edit")
    assert len(edits) == 2
    edits[1].click()
    box = browser.find_element(By.ID, "input")
    assert box.get_attribute("value") == "Second question"
    assert [text_of(e).strip() for e in browser.find_elements(By.CSS_SELECTOR, ".message .content")] == ["First question", "First answer"]
    saved = browser.execute_script("return JSON.parse(localStorage.getItem('mnemo.chat.history'))")
    assert saved == history[:2]
    # The edited question goes with the turns before it.
    set_setting(browser, "temperature", "0")
    set_setting(browser, "max-tokens", "8")
    box.clear()
    bubble = send_message(browser, "Another question", 2)
    assert wait_finished(browser, bubble) == "done"
    system = {"role": "system", "content": "You are a helpful assistant."}
    expected = client.chat.completions.create(model=model_id, temperature=0, max_tokens=8,
                                              messages=[system] + history[:2] + [{"role": "user", "content": "Another question"}])
    assert raw_reply(bubble) == expected.choices[0].message.content
    # Editing the first message empties the conversation.
    browser.find_elements(By.CSS_SELECTOR, ".message.user button.edit")[0].click()
    assert box.get_attribute("value") == "First question"
    assert not browser.find_elements(By.CSS_SELECTOR, ".message")
    assert browser.find_element(By.ID, "empty").is_displayed()
    assert browser.execute_script("return localStorage.getItem('mnemo.chat.history')") is None
    set_setting(browser, "max-tokens", "16")


def test_a_model_picker_when_several_are_served(browser, start_server):
    two = start_server("--model", chat_model_path(), "--model", reference_model_path())
    browser.get(two.url + "/")
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    picker = browser.find_element(By.ID, "model-picker")
    wait(browser, 20).until(lambda d: picker.is_displayed())
    options = [o.get_attribute("value") for o in picker.find_elements(By.TAG_NAME, "option")]
    assert options == ["SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m"]
    assert not browser.find_element(By.ID, "model-name").is_displayed()
    Select(picker).select_by_value("gemma-3-270m-q4_k_m")
    set_setting(browser, "temperature", "0")
    set_setting(browser, "max-tokens", "8")
    bubble = send_message(browser, "Name a fruit.", 1)
    assert wait_finished(browser, bubble) == "done"
    import openai
    with openai.OpenAI(base_url=two.base_url, api_key="unused", max_retries=0, timeout=120) as c:
        system = {"role": "system", "content": "You are a helpful assistant."}
        expected = c.chat.completions.create(model="gemma-3-270m-q4_k_m", temperature=0, max_tokens=8,
                                             messages=[system, {"role": "user", "content": "Name a fruit."}])
    assert raw_reply(bubble) == expected.choices[0].message.content
    # The choice is kept across a reload.
    browser.refresh()
    wait(browser, 20).until(lambda d: d.find_element(By.ID, "model-picker").get_attribute("value") == "gemma-3-270m-q4_k_m")
    browser.execute_script("localStorage.clear()")
    two.terminate()
