"""The web console in a real browser (issue 15 item 2): Debian's chromium, headless, driven by selenium through the
system chromedriver (no browser download). One standalone broker, one `orbitmq console` process and one browser
for the module. The page loads; shows a topic created here with its message count; a group's lag goes down after
consuming; a message is found by key with its delivery status; a dead letter is resent and consumed again; the
login page guards a console with a configured user.

ORBITMQ_CONSOLE_SCREENSHOTS=<dir> also saves screenshots of the main pages there (docs/img/console-*.png are
made that way)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from orbitmq.client import BlockingAdmin, BlockingProducer, BlockingPushConsumer, ConsumeResult
from orbitmq.model import Message, MessageExt
from orbitmq.testing.procs import LOCALHOST, ServerProcess, Standalone, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHROMIUM = os.environ.get("ORBITMQ_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ORBITMQ_CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = os.environ.get("ORBITMQ_CONSOLE_SCREENSHOTS")
T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], what: str, timeout_s: float = 30.0, interval_s: float = 0.2) -> T:
    """Poll fn until it returns something truthy (exceptions count as not yet); fail with `what` and the last
    value or error after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
            last = value
        except Exception as exc:  # noqa: BLE001 - the page or broker is not there yet
            last = exc
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


# ---- fixtures ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("console-broker"), messageDelayLevel="1s 1s 1s 1s 1s").start()
    try:
        yield s
    finally:
        s.close()


def start_console(directory: Path, namesrv: str, *extra: str) -> tuple[ServerProcess, str]:
    port = free_port()
    proc = ServerProcess.cli(["console", "-n", namesrv, "--host", LOCALHOST, "-p", str(port), *extra],
                             directory / f"console-{port}.log", ports=[port], name=f"console:{port}").start()
    return proc, f"http://{LOCALHOST}:{port}"


@pytest.fixture(scope="module")
def console(standalone: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("console")
    conf = d / "console.yml"
    conf.write_text("sampleIntervalSeconds: 0.5\n", encoding="utf-8")  # a TPS chart within seconds
    proc, url = start_console(d, standalone.namesrv_addr, "--config", str(conf))
    try:
        yield url
    finally:
        proc.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(p) and os.access(p, os.X_OK))]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: the console tests need Debian's chromium and chromium-driver "
                    "(`./dev test` installs them; or apt-get install -y chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        pytest.fail(f"selenium does not import ({exc}): install the test extra (pip install -e '.[test]')")
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must never try to download a browser or driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1440,1000", "--lang=en-US", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


# ---- page helpers ----------------------------------------------------------------------------------------------
def go(driver: Any, url: str, timeout_s: float = 30.0) -> None:
    """Open a hash route and wait until the page rendered it (view[data-loaded] changes); on time-out the page's
    error box (an API error) is in the failure message."""
    loaded = "const v = document.getElementById('view'); return v ? v.dataset.loaded || null : null"
    before = driver.execute_script(loaded)
    driver.get(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = driver.execute_script(loaded)
        if now and now != before:
            return
        time.sleep(0.1)
    error = driver.execute_script("const e = document.getElementById('error'); return e ? e.textContent : null")
    pytest.fail(f"{url} did not render within {timeout_s} s (error box: {error!r})")


def cell(driver: Any, table_id: str, key: str, col: str) -> str | None:
    """Text of a table cell by row key (data-key) and column (data-col); None when there is no such row."""
    return driver.execute_script(
        "const row = [...document.querySelectorAll('#' + arguments[0] + ' tbody tr')]"
        "  .find(r => r.dataset.key === arguments[1]);"
        "if (!row) return null; const c = row.querySelector('td[data-col=\"' + arguments[2] + '\"]');"
        "return c ? c.textContent : null", table_id, key, col)


def text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def click_refresh(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    before = driver.execute_script("return document.getElementById('view').dataset.loaded")
    driver.find_element(By.ID, "refresh").click()
    wait_for(lambda: driver.execute_script("return document.getElementById('view').dataset.loaded") != before,
             "the page to refresh")


def shot(driver: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / f"console-{name}.png"))


def no_error(driver: Any) -> bool:
    return bool(driver.execute_script("return document.getElementById('error').hidden"))


def send(namesrv: str, topic: str, keys: list[str], body: str = "payload") -> None:
    p = BlockingProducer("P_console", namesrv)
    p.start()
    try:
        for k in keys:
            m = Message(topic, f"{body} {k}".encode())
            m.keys = k
            p.send(m)
    finally:
        p.shutdown()


class Received:
    def __init__(self, fail_keys: frozenset[str] = frozenset()) -> None:
        self.fail_keys = fail_keys
        self.seen: list[MessageExt] = []
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeResult:
        with self.lock:
            self.seen.extend(msgs)
        return ConsumeResult.RECONSUME_LATER if any(m.keys and m.keys[0] in self.fail_keys for m in msgs) \
            else ConsumeResult.SUCCESS

    def keys(self) -> list[str]:
        with self.lock:
            return [m.keys[0] for m in self.seen if m.keys]


def consume(namesrv: str, group: str, topic: str, until: Callable[[Received], bool], what: str,
            listener: Received | None = None, **kw: Any) -> Received:
    """Run a push consumer until `until(received)`; its shutdown commits the offsets."""
    rec = listener or Received()
    c = BlockingPushConsumer(group, namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                             rebalance_interval_ms=1000, **kw)
    c.subscribe(topic, "*", rec)
    c.start()
    try:
        wait_for(lambda: until(rec), what, timeout_s=60)
    finally:
        c.shutdown()
    return rec


# ---- tests -----------------------------------------------------------------------------------------------------
def test_page_loads_with_the_cluster(browser: Any, console: str, standalone: Standalone) -> None:
    go(browser, console + "/#/cluster")
    assert browser.title == "OrbitMQ console"
    wait_for(lambda: cell(browser, "brokers", standalone.broker_addr, "role"), "the broker row")
    assert cell(browser, "brokers", standalone.broker_addr, "brokerName") == "broker-a"
    assert "MASTER" in (cell(browser, "brokers", standalone.broker_addr, "role") or "")
    assert cell(browser, "brokers", standalone.broker_addr, "online") == "online"
    assert text(browser, "#stat-brokers") == "1"
    # served without any outside asset: every script / stylesheet / image the page loaded is the console's own
    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and all(u.startswith(console) for u in urls), urls
    shot(browser, "cluster")


def test_topic_with_its_message_count(browser: Any, console: str, standalone: Standalone) -> None:
    admin = BlockingAdmin(standalone.namesrv_addr)
    admin.start()
    try:
        admin.update_topic("ConsoleCountT", read_queue_nums=4, write_queue_nums=4)
    finally:
        admin.shutdown()
    send(standalone.namesrv_addr, "ConsoleCountT", [f"c{i}" for i in range(7)])
    go(browser, console + "/#/topics")
    wait_for(lambda: cell(browser, "topics", "ConsoleCountT", "messages") == "7", "ConsoleCountT with 7 messages",
             interval_s=0.5)
    assert cell(browser, "topics", "ConsoleCountT", "queues") == "4"
    shot(browser, "topics")
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, '#topics a[data-topic-link="ConsoleCountT"]').click()
    wait_for(lambda: browser.execute_script("return document.getElementById('view').dataset.page") == "topic",
             "the topic page")
    wait_for(lambda: text(browser, "#topic-messages") == "7", "the topic page's message count")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 4
    assert browser.find_element(By.ID, "tps-chart").tag_name == "svg"
    # the TPS chart: the console samples the viewed topic; sends while it is viewed show up as a rate > 0
    # (a read of the topic is a sample too, besides the console's own every 0.5 s)
    api = "return fetch('/api/topics/ConsoleCountT').then(r => r.json()).then(d => d.tps)"
    for burst in range(3):
        send(standalone.namesrv_addr, "ConsoleCountT", [f"tps{burst}-{i}" for i in range(20)])
        browser.execute_script(api)
    series = browser.execute_script(api)
    assert len(series) >= 3 and max(p["tps"] for p in series) > 0, series
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#tps-chart polyline") or click_refresh(browser),
             "the TPS line on the chart", interval_s=0.5)
    # the count refreshes on the page's own cycle, not with the chart: wait for it
    wait_for(lambda: text(browser, "#topic-messages") == "67" or click_refresh(browser),
             "the topic page's count after the bursts", interval_s=0.5)
    shot(browser, "topic")


def test_group_lag_goes_down_after_consuming(browser: Any, console: str, standalone: Standalone) -> None:
    ns = standalone.namesrv_addr
    send(ns, "ConsoleLagT", [f"first{i}" for i in range(3)])
    consume(ns, "G_console_lag", "ConsoleLagT", lambda r: len(set(r.keys())) >= 3, "the first 3 messages")
    send(ns, "ConsoleLagT", [f"later{i}" for i in range(6)])
    go(browser, console + "/#/group/G_console_lag")
    wait_for(lambda: text(browser, "#group-lag") == "6" or click_refresh(browser), "lag 6 on the group page",
             interval_s=0.5)
    shot(browser, "group")
    consume(ns, "G_console_lag", "ConsoleLagT", lambda r: {f"later{i}" for i in range(6)} <= set(r.keys()),
            "the 6 later messages")
    wait_for(lambda: text(browser, "#group-lag") == "0" or click_refresh(browser), "lag 0 after consuming",
             interval_s=0.5)
    go(browser, console + "/#/groups")
    wait_for(lambda: cell(browser, "groups", "G_console_lag", "lag") == "0", "the groups list with lag 0")
    assert "ConsoleLagT" in (cell(browser, "groups", "G_console_lag", "topics") or "")
    shot(browser, "groups")
    # reset by time to an hour ago (the form's default): the group has all 9 messages to consume again
    from selenium.webdriver.common.by import By

    go(browser, console + "/#/group/G_console_lag")
    browser.find_element(By.CSS_SELECTOR, "#reset-offset button[type=submit]").click()
    browser.switch_to.alert.accept()
    wait_for(lambda: text(browser, "#reset-result").startswith("reset 4 queue(s)"), "the reset result")
    wait_for(lambda: text(browser, "#group-lag") == "9" or click_refresh(browser), "lag 9 after the reset",
             interval_s=0.5)


def test_message_found_by_key_with_its_delivery(browser: Any, console: str, standalone: Standalone) -> None:
    from selenium.webdriver.common.by import By

    ns = standalone.namesrv_addr
    send(ns, "ConsoleKeyT", ["order-4711", "order-4712"], body="hello console")
    consume(ns, "G_console_key", "ConsoleKeyT", lambda r: "order-4711" in r.keys(), "order-4711 consumed")
    go(browser, console + "/#/messages?topic=ConsoleKeyT")
    form = browser.find_element(By.ID, "by-key")
    form.find_element(By.NAME, "key").send_keys("order-4711")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: text(browser, "#result-count") == "1 message(s)", "one message found by key")
    row = browser.find_element(By.CSS_SELECTOR, "#messages tbody tr")
    assert "order-4711" in row.text and "hello console order-4711" in row.text
    row.find_element(By.CSS_SELECTOR, "a[data-msgid]").click()
    wait_for(lambda: cell(browser, "delivery", "G_console_key", "status"), "the delivery table")
    wait_for(lambda: cell(browser, "delivery", "G_console_key", "status") == "CONSUMED" or
             row.find_element(By.CSS_SELECTOR, "a[data-msgid]").click(), "G_console_key CONSUMED", interval_s=0.5)
    assert text(browser, "#message-body") == "hello console order-4711"
    assert no_error(browser)
    shot(browser, "message")
    # by time: the form's default range (the last hour) holds both messages of the topic
    browser.find_element(By.CSS_SELECTOR, "#by-time button[type=submit]").click()
    wait_for(lambda: text(browser, "#result-count") == "2 message(s)", "both messages found by time")
    assert {"order-4711", "order-4712"} <= set(text(browser, "#messages").split())


def test_dead_letter_resent_and_consumed_again(browser: Any, console: str, standalone: Standalone) -> None:
    from selenium.webdriver.common.by import By

    ns = standalone.namesrv_addr
    send(ns, "ConsoleDlqT", ["fine-1", "poison-1"])
    failing = Received(fail_keys=frozenset({"poison-1"}))
    admin = BlockingAdmin(ns)
    admin.start()
    try:
        def in_dlq(_: Received) -> bool:
            return bool(admin.query_msg_by_key("%DLQ%G_console_dlq", "poison-1"))

        # 1 + max_reconsume_times deliveries of poison-1 fail: then it is a dead letter
        consume(ns, "G_console_dlq", "ConsoleDlqT", in_dlq, "poison-1 in %DLQ%G_console_dlq", listener=failing,
                max_reconsume_times=1)
    finally:
        admin.shutdown()
    assert failing.keys().count("poison-1") >= 2  # the first delivery and max_reconsume_times=1 retry failed
    go(browser, console + "/#/dlq/G_console_dlq")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#dlq tbody tr") or click_refresh(browser),
             "the dead letter on the DLQ page", interval_s=0.5)
    row = browser.find_element(By.CSS_SELECTOR, "#dlq tbody tr")
    assert "poison-1" in row.text and "ConsoleDlqT" in row.text
    shot(browser, "dlq")
    row.find_element(By.CSS_SELECTOR, "button.resend").click()
    wait_for(lambda: text(browser, "#resend-result").startswith("resent"), "the resend result")
    assert "%RETRY%G_console_dlq" in text(browser, "#resend-result")
    # the group gets it again, under its original topic, and now consumes it
    again = consume(ns, "G_console_dlq", "ConsoleDlqT", lambda r: "poison-1" in r.keys(), "poison-1 again")
    redelivered = [m for m in again.seen if m.keys == ["poison-1"]]
    assert redelivered[0].topic == "ConsoleDlqT"
    assert redelivered[0].properties.get("ORIGIN_MESSAGE_ID")


def test_controller_page_without_controllers(browser: Any, console: str, standalone: Standalone) -> None:
    go(browser, console + "/#/controller")
    wait_for(lambda: text(browser, "#no-controllers"), "the no-controller note")
    assert cell(browser, "controller-brokers", standalone.broker_addr, "brokerName") == "broker-a"


def test_controller_view_with_a_controller(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Controller mode (one controller, a group of two): the controller page shows the leader and the group's
    SyncStateSet with both members; the cluster page shows epochs and SyncStateSet membership."""
    from orbitmq.testing.controller_cluster import ControllerCluster

    root = tmp_path_factory.mktemp("console-controller")
    c = ControllerCluster(root / "cluster", controllers=1, group_size=2)
    proc = None
    try:
        c.start(timeout_s=90)
        ctl = c.controllers[0].addr
        proc, url = start_console(root, c.ns_addr, "-a", ctl)
        go(browser, url + "/#/controller")
        wait_for(lambda: cell(browser, "controllers", ctl, "isLeader") == "leader", "the controller as leader")
        wait_for(lambda: (cell(browser, "sync-state", "broker-a", "inSync") or "").count("@") == 2
                 or click_refresh(browser), "both members in broker-a's SyncStateSet", interval_s=0.5)
        master = c.members()[0].addr
        assert cell(browser, "sync-state", "broker-a", "masterAddress") == master
        shot(browser, "controller")
        go(browser, url + "/#/cluster")
        wait_for(lambda: cell(browser, "brokers", c.members()[1].addr, "inSync") == "yes", "the slave in sync")
        assert cell(browser, "brokers", master, "role") in ("SYNC_MASTER", "ASYNC_MASTER")
        assert (cell(browser, "brokers", master, "epoch") or "-") != "-"
    except BaseException:
        print(c.logs(40))
        raise
    finally:
        if proc is not None:
            proc.close()
        c.close()


def test_login_guards_a_console_with_a_user(browser: Any, standalone: Standalone,
                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    from selenium.webdriver.common.by import By

    d = tmp_path_factory.mktemp("console-login")
    conf = d / "console.yml"
    conf.write_text("login:\n  username: ops\n  password: s3cret-pass\nsessionTtlSeconds: 600\n", encoding="utf-8")
    proc, url = start_console(d, standalone.namesrv_addr, "--config", str(conf))
    try:
        browser.delete_all_cookies()
        browser.get(url + "/#/topics")
        wait_for(lambda: browser.current_url.startswith(url + "/login"), "the redirect to the login page")
        shot(browser, "login")
        browser.find_element(By.ID, "username").send_keys("ops")
        browser.find_element(By.ID, "password").send_keys("wrong")
        browser.find_element(By.ID, "login-submit").click()
        wait_for(lambda: "wrong user name or password" in text(browser, "#login-error"), "the login error")
        pw = browser.find_element(By.ID, "password")
        pw.clear()
        pw.send_keys("s3cret-pass")
        browser.find_element(By.ID, "login-submit").click()
        wait_for(lambda: browser.execute_script(
            "const v = document.getElementById('view'); return v && v.dataset.page === 'cluster'"), "the console")
        assert "ops" in text(browser, "#user")
        wait_for(lambda: cell(browser, "brokers", standalone.broker_addr, "brokerName"), "the broker row")
        # the API refuses a request without the session cookie
        status = browser.execute_script(
            "return fetch('/api/cluster', {credentials: 'omit'}).then(r => r.status)")
        assert status == 401
    finally:
        proc.close()


def test_console_signs_its_requests_on_an_acl_broker(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """ACL: a console whose config names an access key (and so a login) reads an aclEnable=true broker; the same
    request from a console without a key is refused (NO_PERMISSION shown as 403)."""
    from selenium.webdriver.common.by import By

    from orbitmq.testing.acl import ADMIN, APP, write_plain_acl

    root = tmp_path_factory.mktemp("console-acl")
    (root / "conf").mkdir()
    write_plain_acl(root / "conf" / "plain_acl.yml")
    s = Standalone(root / "broker", brokerIP1=LOCALHOST, aclEnable="true", rocketmqHome=str(root)).start()
    procs: list[ServerProcess] = []
    try:
        p = BlockingProducer("P_console_acl", s.namesrv_addr, access_key=APP.access_key, secret_key=APP.secret_key)
        p.start()
        try:
            for i in range(3):
                p.send(Message("TopicAcl", f"acl {i}".encode()))
        finally:
            p.shutdown()
        conf = root / "console.yml"
        conf.write_text(f"login: {{username: ops, password: pw-acl}}\n"
                        f"acl: {{accessKey: {ADMIN.access_key}, secretKey: {ADMIN.secret_key}}}\n", encoding="utf-8")
        signed, url = start_console(root, s.namesrv_addr, "--config", str(conf))
        procs.append(signed)
        unsigned, url_unsigned = start_console(root, s.namesrv_addr)
        procs.append(unsigned)

        browser.delete_all_cookies()
        browser.get(url + "/#/topic/TopicAcl")
        wait_for(lambda: browser.current_url.startswith(url + "/login"), "the login page of the ACL console")
        browser.find_element(By.ID, "username").send_keys("ops")
        browser.find_element(By.ID, "password").send_keys("pw-acl")
        browser.find_element(By.ID, "login-submit").click()
        wait_for(lambda: browser.execute_script(
            "const v = document.getElementById('view'); return v && v.dataset.page === 'cluster'"), "the console")
        go(browser, url + "/#/topic/TopicAcl")
        wait_for(lambda: text(browser, "#topic-messages") == "3", "TopicAcl's 3 messages through the signed console")

        browser.get(url_unsigned + "/")
        status, body = browser.execute_script(
            "return fetch('/api/topics/TopicAcl').then(async r => [r.status, (await r.json()).error])")
        assert status == 403, body
        assert "No accessKey" in body
    finally:
        for proc in procs:
            proc.close()
        s.close()
