"""The console in a real browser: Playwright (PyPI) driving Debian's Chromium
(scripts/install-system-deps.sh; Playwright's own browser download is not used), one
browser for the module, against ``lmq serve`` with a users file and real clients: log
in (a wrong password refused with its message), the overview's rates move while an MQTT
client publishes, a topic created on the Topics page is used at once by an HTTP client
(the gateway creates no topic by itself here), a form with a bad topic name is refused
with the API's message, a group reset to earliest is seen by its consumer, a connection
closed from its table is closed; the destructive actions behind their confirmations (a
topic deleted once its name is typed, a cancel deleting nothing; a group deleted with
its offsets; a blocked FIFO message group released, the messages behind it flowing).

With ``LMQ_CONSOLE_SCREENSHOTS=DIR`` the tests also save screenshots of the pages they
visit there (docs/console.md's come from ``LMQ_CONSOLE_SCREENSHOTS=docs/images``)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from click.testing import CliRunner
from playwright.sync_api import expect, sync_playwright

from cli.main import main

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The longest wait for something the page shows (a bound, not a speed assertion):
#: the overview samples every 5 s and a rate needs two samples.
WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)

#: A rate above zero as the legend prints it (1, 12.5, 1,234, 0.4).
NONZERO = re.compile(r"^([1-9][\d,]*(\.\d+)?|0\.\d*[1-9]\d*)$")


AUTH = ("root", "secret")
BOUND = 10.0


def lmq(*args: str) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Console:
    def __init__(self, gw: GatewayProcess) -> None:
        self.gw = gw
        self.base = f"http://127.0.0.1:{gw.ports['unified']}"
        self.mqtt_port = gw.mqtt_port
        shots = os.environ.get("LMQ_CONSOLE_SCREENSHOTS")
        self.shots = Path(shots) if shots else None

    def shot(self, page, name: str) -> None:
        if self.shots is not None:
            self.shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(self.shots / f"console-{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    data = tmp_path_factory.mktemp("console") / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "root", "--password", "secret", "--tag", "administrator", *d)
    lmq("users", "acl", "add", "root", "--both", "#", *d)  # its clients publish and consume
    lmq(
        "users",
        "set-permissions",
        "root",
        "--vhost",
        "/",
        "--configure",
        ".*",
        "--write",
        ".*",
        "--read",
        ".*",
        *d,
    )
    config = data.parent / "gateway.toml"
    port, nobody = free_port(), free_port()
    # a connector rule to a cluster nobody serves: it retries, and the Connector page
    # disables and enables it
    config.write_text(f"""rocketmq_auto_create_topics = false
[connector]
status_address = ""
[connector.clusters.here]
kind = "gateway"
endpoints = ["127.0.0.1:{port}"]
[connector.clusters.away]
kind = "gateway"
endpoints = ["127.0.0.1:{nobody}"]
[[connector.rules]]
name = "console-out"
source = "here"
topic = "console-orders"
target = "away"
""")
    gw = GatewayProcess(data, "--config", str(config), "--unified-port", str(port)).start()
    try:
        yield Console(gw)
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: make system-deps installs it"
    with sync_playwright() as p:
        profile = tempfile.mkdtemp(prefix="lmq-console-chromium-")
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def page(console: Console, browser):
    """One page, logged in as root (the first test logs in through the form)."""
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    page.close()


def login(page, console: Console) -> None:
    page.goto(console.base + "/console/")
    page.wait_for_selector("#nav a, #login-user")  # the page asked who is logged in
    if page.locator("#nav a").count():
        return
    page.fill("#login-user", "root")
    page.fill("#login-password", "secret")
    page.click("form.login button[type=submit]")
    expect(page.locator("#who")).to_contain_text("root")


def test_login(page, console: Console) -> None:
    page.goto(console.base + "/console/")
    page.fill("#login-user", "root")
    page.fill("#login-password", "wrong")
    page.click("form.login button[type=submit]")
    expect(page.locator("form.login .error")).to_have_text("wrong user name or password")
    console.shot(page, "login")
    page.fill("#login-password", "secret")
    page.click("form.login button[type=submit]")
    expect(page.locator("#who")).to_contain_text("root")
    expect(page.locator("#nav a[aria-current=page]")).to_have_text("Overview")
    # the session is a cookie the page cannot read, and nothing of it is in the URL
    assert page.evaluate("document.cookie") == ""
    assert "secret" not in page.url and "csrf" not in page.url


def test_overview_rates_move(page, console: Console) -> None:
    login(page, console)
    stop = threading.Event()
    publisher = Paho(console.mqtt_port, "console-publisher", username="root", password="secret")

    def publish() -> None:
        while not stop.is_set():
            publisher.publish("console/rates", b"x", qos=1)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        page.goto(console.base + "/console/#/overview")
        rate = page.locator("figure", has_text="Messages in / s").locator(
            "[data-series=mqtt] .value"
        )
        expect(rate).to_have_text(NONZERO)
        if console.shots is not None:  # a chart worth a picture: a minute of samples
            page.wait_for_timeout(60_000)
            console.shot(page, "overview")
    finally:
        stop.set()
        thread.join(10)
        publisher.close()


def test_close_connection(page, console: Console) -> None:
    login(page, console)
    client = Paho(console.mqtt_port, "console-victim", username="root", password="secret")
    gone = threading.Event()
    client.client.on_disconnect = lambda *args: gone.set()
    try:
        page.goto(console.base + "/console/#/connections")
        row = page.locator("tr", has_text="console-victim")
        expect(row).to_have_count(1)
        console.shot(page, "connections")
        row.get_by_role("button", name="Close").click()
        dialog = page.locator("dialog#confirm")
        expect(dialog).to_contain_text("console-victim")
        dialog.get_by_role("button", name="Close").click()
        expect(page.locator(".notice.ok")).to_contain_text("closed")
        assert gone.wait(10), "the client's connection was not closed"
    finally:
        client.close()


def publish(console: Console, topic: str, body: str) -> requests.Response:
    """A publish by the JSON API (a real HTTP client)."""
    return requests.post(
        f"{console.base}/v1/topics/{topic}/messages", auth=AUTH, json={"body": body}, timeout=BOUND
    )


def one_queue_topic(console: Console, topic: str) -> None:
    """A topic of one queue, made through the admin API (auto-creation is off here)."""
    made = requests.put(
        f"{console.base}/v1/admin/topics/{topic}", auth=AUTH, json={"queues": 1}, timeout=BOUND
    )
    assert made.status_code in (200, 201), made.text


def receive(console: Console, group: str, topic: str, n: int) -> list[str]:
    """The bodies of ``n`` messages received (and acked) by ``group``."""
    bodies: list[str] = []
    for _ in range(20):
        r = requests.post(
            f"{console.base}/v1/groups/{group}/topics/{topic}/receive",
            params={"wait_seconds": 2, "max_messages": n - len(bodies)},
            auth=AUTH,
            timeout=BOUND,
        )
        assert r.status_code == 200, r.text
        messages = r.json()["messages"]
        if messages:
            bodies += [m["body"] for m in messages]
            ack = requests.post(
                f"{console.base}/v1/groups/{group}/ack",
                auth=AUTH,
                timeout=BOUND,
                json={"receipt_handles": [m["receipt_handle"] for m in messages]},
            )
            assert ack.status_code == 200, ack.text
        if len(bodies) >= n:
            return bodies
    raise AssertionError(f"{group} received {bodies}, not {n} messages")


def test_create_topic_then_a_client_uses_it(page, console: Console) -> None:
    login(page, console)
    early = publish(console, "console-orders", "early")
    assert early.status_code == 404, early.text  # no such topic, and none made by a send
    page.goto(console.base + "/console/#/topics")
    create = page.locator("form[aria-label='Create a topic']")
    create.locator("[name=name]").fill("console-orders")
    create.locator("[name=queues]").fill("2")
    create.locator("[name=message_type]").select_option("NORMAL")
    create.get_by_role("button", name="Create").click()
    expect(page.locator(".notice.ok")).to_have_text("Topic console-orders created.")
    row = page.locator("tr", has_text="console-orders")
    expect(row).to_contain_text("NORMAL")
    r = publish(console, "console-orders", "hello")
    assert r.status_code == 201, r.text
    page.reload()
    row = page.locator("tr", has_text="console-orders")
    expect(row.locator("td").nth(5)).to_have_text("1")
    row.get_by_role("button", name="Change").click()
    change = page.locator("form[aria-label='Change a topic']")
    expect(change.locator("[name=name]")).to_have_value("console-orders")
    change.locator("[name=queues]").fill("4")
    change.get_by_role("button", name="Change").click()
    expect(page.locator(".notice.ok")).to_have_text("Topic console-orders changed.")
    expect(row.locator("td").nth(2)).to_have_text("4")  # read queues
    console.shot(page, "topics")


def test_bad_form_is_refused_with_a_clear_message(page, console: Console) -> None:
    login(page, console)
    page.goto(console.base + "/console/#/topics")
    create = page.locator("form[aria-label='Create a topic']")
    create.locator("[name=name]").fill("bad name!")
    create.get_by_role("button", name="Create").click()
    expect(create.locator(".error")).to_have_text(
        "the topic name 'bad name!' contains characters other than [%|a-zA-Z0-9_-]"
    )
    expect(page.locator("tr", has_text="bad name!")).to_have_count(0)


def test_reset_group_seen_by_its_consumer(page, console: Console) -> None:
    login(page, console)
    one_queue_topic(console, "console-reset")
    for i in range(3):
        assert publish(console, "console-reset", f"m{i}").status_code == 201
    assert sorted(receive(console, "console-group", "console-reset", 3)) == ["m0", "m1", "m2"]
    page.goto(console.base + "/console/#/groups/console-group")
    summary = page.locator(".summary")
    expect(summary).to_contain_text("Total lag: 0")
    reset = page.locator("form[aria-label='Reset offsets']")
    reset.locator("[name=topic]").fill("console-reset")
    reset.locator("[name=to]").select_option("earliest")
    reset.get_by_role("button", name="Reset").click()
    expect(page.locator(".notice.ok")).to_contain_text("reset to earliest")
    expect(summary).to_contain_text("Total lag: 3")
    console.shot(page, "group")
    assert sorted(receive(console, "console-group", "console-reset", 3)) == ["m0", "m1", "m2"]


def test_group_in_flight_messages_listed_then_one_acked(page, console: Console) -> None:
    login(page, console)
    one_queue_topic(console, "console-fly")
    for i in range(2):
        assert publish(console, "console-fly", f"f{i}").status_code == 201
    popped: list[dict[str, str]] = []
    for _ in range(10):  # popped and not acked: in flight for five minutes
        r = requests.post(
            f"{console.base}/v1/groups/console-fly-group/topics/console-fly/receive",
            params={"wait_seconds": 1, "max_messages": 2, "invisible_seconds": 300},
            auth=AUTH,
            timeout=BOUND,
        )
        assert r.status_code == 200, r.text
        popped += r.json()["messages"]
        if len(popped) == 2:
            break
    assert sorted(m["body"] for m in popped) == ["f0", "f1"]
    page.goto(console.base + "/console/#/groups/console-fly-group")
    expect(page.locator(".summary")).to_contain_text("in flight: 2")
    page.get_by_role("button", name="In flight").click()
    rows = page.locator("table.in-flight tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text(popped[0]["message_id"])
    acked = requests.post(
        f"{console.base}/v1/groups/console-fly-group/ack",
        auth=AUTH,
        timeout=BOUND,
        json={"receipt_handles": [popped[0]["receipt_handle"]]},
    )
    assert acked.status_code == 200, acked.text
    expect(rows).to_have_count(1)  # the page reloads every 5 s, the list with it
    expect(page.locator(".summary")).to_contain_text("in flight: 1")


def test_message_browser_finds_and_peeks(page, console: Console) -> None:
    login(page, console)
    one_queue_topic(console, "console-browse")
    sent = [publish(console, "console-browse", f"b{i}").json() for i in range(3)]
    page.goto(console.base + "/console/#/messages")
    peek = page.locator("form[aria-label^='Peek']")
    peek.locator("[name=lmq]").fill("rmq:console-browse:0")
    peek.get_by_role("button", name="Peek").click()
    rows = page.locator(".results tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1)).to_contain_text("b1")
    expect(page.locator(".results .summary")).to_contain_text("offsets 0 to 3")
    console.shot(page, "messages")
    find = page.locator("form[aria-label='Find by message id']")
    find.locator("[name=id]").fill(sent[2]["message_id"])
    find.get_by_role("button", name="Find").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("b2")
    # peeking consumed nothing: a group still receives every message
    assert sorted(receive(console, "console-browser", "console-browse", 3)) == ["b0", "b1", "b2"]


@pytest.mark.parametrize(
    "section", ["connections", "sessions", "topics", "lmqs", "groups", "amqp", "users"]
)
def test_tables_load_without_error(page, console: Console, section: str) -> None:
    login(page, console)
    page.goto(f"{console.base}/console/#/{section}")
    table = page.locator("section.paged").first
    expect(table.locator("tbody tr").first).to_be_visible()
    expect(table.locator(".error")).to_be_hidden()
    expect(page.locator(".notice.error")).to_have_count(0)
    console.shot(page, section)


def test_table_pages_sorts_and_filters_on_the_server(page, console: Console) -> None:
    login(page, console)
    with requests.Session() as http:
        for i in range(60):
            r = http.put(
                f"{console.base}/v1/admin/topics/console-p-{i:02d}",
                auth=AUTH,
                json={"queues": 1},
                timeout=BOUND,
            )
            assert r.status_code in (200, 201), r.text
        every = http.get(
            f"{console.base}/v1/admin/topics", auth=AUTH, params={"limit": 1000}, timeout=BOUND
        ).json()["items"]
    names = [t["name"] for t in every]
    total = len(names)
    page.goto(console.base + "/console/#/topics")
    table = page.locator("section.paged")
    status = table.locator(".toolbar .status")
    expect(status).to_have_text(f"1\u201350 of {total}")
    expect(table.locator("tbody tr")).to_have_count(50)
    table.get_by_role("button", name="Next").click()
    expect(status).to_have_text(f"51\u2013{total} of {total}")
    table.get_by_role("button", name="Previous").click()
    expect(status).to_have_text(f"1\u201350 of {total}")
    table.get_by_role("button", name="Topic").click()  # sorted by name: now descending
    expect(table.locator("tbody tr").first.locator("td").first).to_have_text(max(names))
    table.get_by_placeholder("Filter by topic").fill("console-p-4")
    expect(table.locator("tbody tr")).to_have_count(10)
    expect(table.locator("tbody tr").first.locator("td").first).to_have_text("console-p-49")


def test_add_user_who_logs_in_then_an_acl_rule(page, console: Console) -> None:
    login(page, console)
    page.goto(console.base + "/console/#/users")
    add = page.locator("form[aria-label='Add a user']")
    add.locator("[name=name]").fill("console-dev")
    add.locator("[name=password]").fill("dev-pw")
    add.get_by_role("button", name="Add").click()
    expect(page.locator(".notice.ok")).to_have_text("User console-dev added.")
    client = Paho(
        console.mqtt_port, "console-dev-client", username="console-dev", password="dev-pw"
    )
    try:
        assert client.rc == 0  # the users file was reloaded at once
    finally:
        client.close()
    page.locator("a", has_text="console-dev").click()
    rule = page.locator("form[aria-label='Add an ACL rule']")
    rule.locator("[name=access]").select_option("publish")
    rule.locator("[name=filter]").fill("devices/+/up")
    rule.get_by_role("button", name="Add rule").click()
    expect(page.locator(".notice.ok")).to_contain_text("Rule added")
    expect(page.locator("table.acl tbody tr")).to_have_count(1)
    expect(page.locator("table.acl tbody")).to_contain_text("devices/+/up")
    console.shot(page, "user")


def amqp_opens(console: Console, vhost: str) -> bool:
    """Whether root's AMQP connection to ``vhost`` opens (pika, a real client)."""
    params = pika.ConnectionParameters(
        "127.0.0.1",
        console.gw.ports["amqp"],
        virtual_host=vhost,
        credentials=pika.PlainCredentials(*AUTH),
    )
    try:
        pika.BlockingConnection(params).close()
    except pika.exceptions.AMQPConnectionError:
        return False
    return True


def test_vhost_added_used_and_deleted_and_a_certificate_mapped(page, console: Console) -> None:
    login(page, console)
    page.goto(console.base + "/console/#/users")
    add = page.locator("form[aria-label='Add a vhost']")
    add.locator("[name=vhost]").fill("console-staging")
    add.locator("[name=description]").fill("the staging apps")
    add.get_by_role("button", name="Add vhost").click()
    expect(page.locator(".notice.ok")).to_have_text("Vhost console-staging added.")
    row = page.locator("table.vhosts tr", has_text="console-staging")
    expect(row).to_contain_text("the staging apps")
    again = page.locator("form[aria-label='Add a vhost']")
    again.locator("[name=vhost]").fill("console-staging")
    again.get_by_role("button", name="Add vhost").click()
    expect(again.locator(".error")).to_contain_text("console-staging")  # 409: it exists
    # root permitted on it from its user page: an AMQP client opens it at once
    page.goto(console.base + "/console/#/users/root")
    perms = page.locator("form[aria-label='Set AMQP permissions']")
    perms.locator("[name=vhost]").fill("console-staging")
    perms.get_by_role("button", name="Set").click()
    expect(page.locator(".notice.ok")).to_have_text("Permissions on console-staging set.")
    assert amqp_opens(console, "console-staging")
    # a client certificate subject mapped to root, then unmapped after its confirmation
    cert = page.locator("form[aria-label='Map a client certificate']")
    cert.locator("[name=subject]").fill("CN=console-dev,O=Acme")
    cert.get_by_role("button", name="Map").click()
    expect(page.locator(".notice.ok")).to_contain_text("mapped to root")
    certs = page.locator("table.certificates tbody tr")
    expect(certs).to_have_count(1)
    expect(certs.first).to_contain_text("CN=console-dev")
    certs.first.get_by_role("button", name="Unmap").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("no longer logs in as root")
    dialog.locator("#confirm-ok").click()
    expect(page.locator(".notice.ok")).to_contain_text("unmapped")
    expect(page.locator("table.certificates tbody")).to_contain_text("none")
    # the vhost deleted once its name is typed: the client is refused
    page.goto(console.base + "/console/#/users")
    row = page.locator("table.vhosts tr", has_text="console-staging")
    row.get_by_role("button", name="Delete").click()
    ok = dialog.locator("#confirm-ok")
    expect(ok).to_be_disabled()
    dialog.locator("#confirm-typed").fill("console-staging")
    ok.click()
    expect(page.locator(".notice.ok")).to_have_text("Vhost console-staging deleted.")
    expect(page.locator("table.vhosts tr", has_text="console-staging")).to_have_count(0)
    assert not amqp_opens(console, "console-staging")


def test_kick_an_offline_session(page, console: Console) -> None:
    login(page, console)
    client = Paho(
        console.mqtt_port, "console-sleeper", clean=False, username="root", password="secret"
    )
    client.subscribe("console/alerts/#", qos=1)
    client.disconnect()
    client.close()
    page.goto(console.base + "/console/#/sessions")
    row = page.locator("tr", has_text="console-sleeper")
    expect(row.locator("td").nth(1)).to_have_text("no")  # connected
    expect(row.locator("td").nth(3)).to_have_text("1")  # subscriptions
    row.get_by_role("button", name="Filters").click()
    expect(page.locator(".notice.ok")).to_contain_text("console/alerts/# (QoS 1")
    console.shot(page, "sessions")
    row.get_by_role("button", name="Kick").click()
    page.locator("dialog#confirm").get_by_role("button", name="Kick").click()
    expect(page.locator(".notice.ok")).to_have_text("Session console-sleeper kicked.")
    expect(page.locator("tr", has_text="console-sleeper")).to_have_count(0)
    again = Paho(
        console.mqtt_port, "console-sleeper", clean=False, username="root", password="secret"
    )
    try:
        assert not again.session_present
    finally:
        again.close()


def test_purge_an_amqp_queue(page, console: Console) -> None:
    login(page, console)
    params = pika.ConnectionParameters(
        "127.0.0.1", console.gw.ports["amqp"], credentials=pika.PlainCredentials(*AUTH)
    )
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare("console-q", durable=True)
        ch.confirm_delivery()
        for i in range(4):
            ch.basic_publish("", "console-q", f"q{i}".encode())
        page.goto(console.base + "/console/#/amqp")
        row = page.locator("section.paged").first.locator("tr", has_text="console-q")
        expect(row.locator("td").nth(2)).to_have_text("4")
        console.shot(page, "amqp")
        row.get_by_role("button", name="Purge").click()
        page.locator("dialog#confirm").get_by_role("button", name="Purge").click()
        expect(page.locator(".notice.ok")).to_have_text(
            "Queue console-q purged: 4 messages dropped."
        )
        expect(row.locator("td").nth(2)).to_have_text("0")
        method, _, _ = ch.basic_get("console-q", auto_ack=True)
        assert method is None
    finally:
        conn.close()


def test_disable_and_enable_a_connector_rule(page, console: Console) -> None:
    login(page, console)
    page.goto(console.base + "/console/#/connector")
    row = page.locator("tr", has_text="console-out")
    expect(row).to_contain_text("here \u2192 away")
    expect(row.locator("td").nth(2)).not_to_have_text("stopped")
    row.get_by_role("button", name="Disable").click()
    page.locator("dialog#confirm").get_by_role("button", name="Disable").click()
    expect(page.locator(".notice.ok")).to_have_text("Rule console-out disabled.")
    expect(row.locator("td").nth(2)).to_have_text("stopped")
    console.shot(page, "connector")
    rules = requests.get(f"{console.base}/v1/admin/connector/rules", auth=AUTH, timeout=BOUND)
    assert [(r["rule"], r["state"]) for r in rules.json()["items"]] == [("console-out", "stopped")]
    row.get_by_role("button", name="Enable").click()
    expect(page.locator(".notice.ok")).to_have_text("Rule console-out enabled.")
    expect(row.locator("td").nth(2)).not_to_have_text("stopped")


def test_verify_the_store_from_the_overview(page, console: Console) -> None:
    login(page, console)
    page.goto(console.base + "/console/#/overview")
    page.get_by_role("button", name="Verify the store").click()
    expect(page.locator(".status.verify")).to_contain_text("no problem")
    expect(page.locator(".status.verify")).to_contain_text("verified:")


def test_clean_lmqs_after_a_dry_run(page, console: Console) -> None:
    login(page, console)
    one_queue_topic(console, "console-clean")
    assert publish(console, "console-clean", "x").status_code == 201
    page.goto(console.base + "/console/#/lmqs")
    clean = page.locator("form[aria-label^='Clean idle LMQs']")
    clean.locator("[name=prefix]").fill("rmq:console-clean:")
    clean.locator("[name=idle]").fill("0")
    clean.get_by_role("button", name="Clean").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Remove 1 LMQs (1 messages")
    expect(dialog).to_contain_text("rmq:console-clean:0")
    dialog.get_by_role("button", name="Remove").click()
    expect(page.locator(".notice.ok")).to_have_text("1 LMQs removed.")
    gone = requests.get(
        f"{console.base}/v1/admin/lmqs/rmq:console-clean:0", auth=AUTH, timeout=BOUND
    )
    assert gone.status_code == 404


def test_delete_a_topic_after_typing_its_name(page, console: Console) -> None:
    login(page, console)
    one_queue_topic(console, "console-doomed")
    assert publish(console, "console-doomed", "x").status_code == 201
    page.goto(console.base + "/console/#/topics")
    table = page.locator("section.paged")
    table.get_by_placeholder("Filter by topic").fill("console-doomed")
    row = table.locator("tr", has_text="console-doomed")
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Delete").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Delete topic console-doomed and its queues?")
    ok = dialog.locator("#confirm-ok")
    expect(ok).to_be_disabled()  # until the topic's name is typed
    dialog.locator("#confirm-typed").fill("console-doome")
    expect(ok).to_be_disabled()
    dialog.get_by_role("button", name="Cancel").click()  # cancelled: nothing deleted
    expect(dialog).to_be_hidden()
    assert publish(console, "console-doomed", "still").status_code == 201
    row.get_by_role("button", name="Delete").click()
    dialog.locator("#confirm-typed").fill("console-doomed")
    expect(ok).to_be_enabled()
    ok.click()
    expect(page.locator(".notice.ok")).to_have_text("Topic console-doomed deleted.")
    expect(table.locator("tr", has_text="console-doomed")).to_have_count(0)
    gone = publish(console, "console-doomed", "late")  # auto-creation is off here
    assert gone.status_code == 404, gone.text


def test_delete_a_group_and_its_offsets(page, console: Console) -> None:
    login(page, console)
    one_queue_topic(console, "console-gdel")
    for i in range(2):
        assert publish(console, "console-gdel", f"d{i}").status_code == 201
    assert sorted(receive(console, "console-gone", "console-gdel", 2)) == ["d0", "d1"]
    page.goto(console.base + "/console/#/groups/console-gone")
    expect(page.locator("table.queues tbody")).to_contain_text("console-gdel")
    page.get_by_role("button", name="Delete group").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Delete consumer group console-gone and its offsets?")
    dialog.locator("#confirm-typed").fill("console-gone")
    dialog.locator("#confirm-ok").click()
    expect(page).to_have_url(re.compile(r"#/groups$"))
    table = page.locator("section.paged")
    table.get_by_placeholder("Filter by group").fill("console-gone")
    expect(table.locator("tbody")).to_contain_text("nothing matches the filter")
    shown = requests.get(f"{console.base}/v1/admin/groups/console-gone", auth=AUTH, timeout=BOUND)
    assert shown.status_code == 404, shown.text


def test_release_a_blocked_fifo_message_group(page, console: Console) -> None:
    login(page, console)
    made = requests.put(
        f"{console.base}/v1/admin/topics/console-fifo",
        auth=AUTH,
        json={"queues": 1, "message_type": "FIFO"},
        timeout=BOUND,
    )
    assert made.status_code in (200, 201), made.text
    for i in range(3):
        r = requests.post(
            f"{console.base}/v1/topics/console-fifo/messages",
            auth=AUTH,
            json={"body": f"f{i}", "message_group": "line-1"},
            timeout=BOUND,
        )
        assert r.status_code == 201, r.text

    def pop(invisible: int) -> list[str]:
        r = requests.post(
            f"{console.base}/v1/groups/console-ordered/topics/console-fifo/receive",
            auth=AUTH,
            json={"ordered": True, "invisible_seconds": invisible, "wait_seconds": 2},
            timeout=BOUND,
        )
        assert r.status_code == 200, r.text
        return [m["body"] for m in r.json()["messages"]]

    assert pop(1) == ["f0"]  # the head, never acked: its group waits for its retry
    page.goto(console.base + "/console/#/groups/console-ordered")
    blocked = page.locator("table.blocked tbody tr")
    expect(blocked).to_have_count(1)  # the page reloads every 5 s
    expect(blocked).to_contain_text("line-1")
    blocked.get_by_role("button", name="Release").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Release FIFO message group line-1 of console-ordered")
    dialog.get_by_role("button", name="Release").click()
    expect(page.locator(".notice.ok")).to_have_text("Message group line-1 released.")
    expect(page.locator("table.blocked")).to_have_count(0)
    # its head given up, the messages behind it flow to the consumer, in order
    assert pop(30) == ["f1"]
