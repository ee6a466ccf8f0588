"""The admin console in real headless Chromium (Debian's, driven by Playwright), each flow end
to end against a live gateway: signing in with the admin token or the read-only metrics
token; virtual keys; provider keys; breakers and the retry and hedge budgets; the request log
with its filters, one request's attempts and the CSV export; spend; the redacted config and a
reload that fails. Screenshots go to target/artifacts/console/.
"""

import base64
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import json
import os
import pathlib
import tempfile
import threading
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, Fake, free_port, start

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
ADMIN_TOKEN = "console-admin-token-7f3a9c"
METRICS_TOKEN = "console-metrics-token-51be02"
MASTER_KEY = base64.b64encode(bytes(range(32))).decode()
PROVIDER_SECRET = "sk-console-provider-secret-0001"
ROTATED_SECRET = "sk-console-provider-secret-0002"
URL_PASSWORD = "pw-in-a-url-93c1"
ARTIFACTS = ROOT / "target" / "artifacts" / "console"

CONFIG = """
[server]
listen = "127.0.0.1:{port}"

[auth]
required = true

[store]
url = "sqlite://{db}"

[admin]
metrics_token = "{metrics_token}"

[retry]
backoff_base = "10ms"
backoff_max = "50ms"
attempt_timeout = "2s"
request_deadline = "10s"
attempts_per_step = 1

[breaker]
consecutive_failures = 2
min_callers = 1
cooldown = "10m"

[[roles]]
name = "team"
budget_per_day = 5
budget_per_month = 50

[[providers]]
name = "primary"
kind = "openai"
base_url = "{primary}"
key_required = false

[[providers]]
name = "secondary"
kind = "openai"
base_url = "{secondary}"
key_required = false

# Never called: its URL carries a password the config view must not show.
[[providers]]
name = "proxied"
kind = "openai"
base_url = "http://ann:{url_password}@127.0.0.1:9/v1"
key_required = false

[[providers]]
name = "flaky"
kind = "openai"
base_url = "{flaky}"
key_required = false

[[prices]]
provider = "primary"
model = "big"
input_per_1m = 10.0
output_per_1m = 10.0

[[prices]]
provider = "secondary"
model = "small"
input_per_1m = 10.0
output_per_1m = 10.0

[[prices]]
provider = "flaky"
model = "wobbly"
input_per_1m = 10.0
output_per_1m = 10.0

[[routes]]
name = "smart"
steps = [
  {{ provider = "primary", model = "big" }},
  {{ provider = "secondary", model = "small" }},
]
hedge = {{ after = "5s", max = 1 }}

[[routes]]
name = "shaky"
steps = [{{ provider = "flaky", model = "wobbly" }}]
"""


def http(method, url, token=None, body=None):
    """A call to the gateway: (status, headers, parsed JSON or text)."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            status, answer_headers, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, answer_headers, raw = error.code, error.headers, error.read()
    text = raw.decode()
    try:
        return status, answer_headers, json.loads(text)
    except ValueError:
        return status, answer_headers, text


class Gateway:
    """A gateway from a config file on disk (so it can be reloaded), with an admin token, a
    metrics token and a SQLite store of its own."""

    def __init__(self):
        self.primary, self.secondary, self.flaky = Fake("primary"), Fake("secondary"), Fake("flaky")
        self.dir = tempfile.TemporaryDirectory()
        self.port = free_port()
        self.file = pathlib.Path(self.dir.name) / "switchyard.toml"
        self.text = CONFIG.format(
            port=self.port,
            db=pathlib.Path(self.dir.name) / "store.db",
            metrics_token=METRICS_TOKEN,
            primary=self.primary.base_url,
            secondary=self.secondary.base_url,
            flaky=self.flaky.base_url,
            url_password=URL_PASSWORD,
        )
        self.file.write_text(self.text)
        env_before = dict(os.environ)
        os.environ["SWITCHYARD_ADMIN_TOKEN"] = ADMIN_TOKEN
        os.environ["SWITCHYARD_MASTER_KEY"] = MASTER_KEY
        try:
            self.process = start(["serve", "--config", str(self.file)], "switchyard listening", "stderr")
        finally:
            os.environ.clear()
            os.environ.update(env_before)
        self.root = f"http://127.0.0.1:{self.port}"

    def admin(self, method, path, body=None):
        return http(method, self.root + path, ADMIN_TOKEN, body)

    def chat(self, key, model="smart"):
        body = {"model": model, "messages": [{"role": "user", "content": "Hello there"}]}
        return http("POST", self.root + "/v1/chat/completions", key, body)

    def logged(self, count):
        """Waits (bounded) until the log holds `count` rows: the writer works in batches."""
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            _, _, answer = self.admin("GET", "/admin/requests?limit=1000")
            if len(answer["requests"]) >= count:
                return answer["requests"]
            time.sleep(0.05)
        raise AssertionError(f"the log never held {count} rows")

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        for fake in (self.primary, self.secondary, self.flaky):
            fake.process.terminate()
            fake.process.wait(timeout=10)
        self.dir.cleanup()


@pytest.fixture(scope="module")
def gateway():
    gateway = Gateway()
    yield gateway
    gateway.close()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with playwright_api.sync_playwright() as p:
        # Debian's Chromium: Playwright downloads nothing.
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # The refusals the flows expect (a wrong token, an invalid file) are logged by the
    # browser too; anything else is a fault of the page.
    expected = ("status of 401", "status of 422")
    page.on(
        "console",
        lambda m: errors.append(m.text) if m.type == "error" and not any(e in m.text for e in expected) else None,
    )
    yield page
    context.close()
    assert not errors, f"the page logged errors: {errors}"


def shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sign_in(page, gateway, token=ADMIN_TOKEN, tab=None):
    page.goto(gateway.root + "/console" + (f"#{tab}" if tab else ""))
    page.get_by_test_id("token").fill(token)
    page.get_by_test_id("sign-in-button").click()
    page.wait_for_selector("[data-testid=view][data-ready=true]")


def open_tab(page, tab):
    page.get_by_test_id(f"tab-{tab}").click()
    page.wait_for_selector(f"[data-testid=view][data-view='{tab}'][data-ready=true]")


def expect(locator):
    return playwright_api.expect(locator)


def new_key(gateway, user="ana", **extra):
    status, _, created = gateway.admin("POST", "/admin/virtual-keys", {"user": user, "role": "team", **extra})
    assert status == 201, created
    return created


def test_sign_in_keeps_the_token_out_of_cookies_and_the_page_cannot_be_framed(gateway, page):
    response = page.goto(gateway.root + "/console")
    headers = response.headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"

    page.get_by_test_id("token").fill("not-a-token")
    page.get_by_test_id("sign-in-button").click()
    expect(page.get_by_test_id("notice-error")).to_contain_text("neither the admin token nor the metrics token")
    shot(page, "01-sign-in-refused")

    page.get_by_test_id("token").fill(ADMIN_TOKEN)
    page.get_by_test_id("sign-in-button").click()
    page.wait_for_selector("[data-testid=view][data-ready=true]")
    expect(page.get_by_test_id("who")).to_have_attribute("data-role", "admin")
    tabs = page.locator("[data-testid=tabs] button").all_inner_texts()
    assert tabs == ["Overview", "Virtual keys", "Provider keys", "Breakers and budgets", "Request log", "Spend", "Config"]
    assert page.context.cookies() == [], "no cookie carries the token"
    assert page.evaluate("sessionStorage.getItem('switchyard.console.token')") == ADMIN_TOKEN
    assert ADMIN_TOKEN not in page.content(), "the token is not written into the page"
    # A reload of the tab keeps the session; signing out forgets it.
    page.reload()
    page.wait_for_selector("[data-testid=view][data-ready=true]")
    shot(page, "02-overview-admin")
    with page.expect_navigation():
        page.get_by_test_id("sign-out").click()
    page.wait_for_selector("body[data-started=true]")
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('switchyard.console.token')") is None


def test_another_origin_can_neither_frame_the_console_nor_read_the_admin_api(gateway, browser):
    console = gateway.root + "/console"
    admin = gateway.root + "/admin/virtual-keys"

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"""<!doctype html><iframe id="f" src="{console}"></iframe>
<script>
window.result = fetch("{admin}", {{headers: {{Authorization: "Bearer {ADMIN_TOKEN}"}}}})
  .then(r => "read " + r.status, e => "refused");
</script>""".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        # The gateway sends no CORS headers: another origin's script cannot read an answer,
        # even holding the token.
        assert page.evaluate("window.result") == "refused"
        # frame-ancestors 'none': the frame stays empty.
        frame = page.frame_locator("#f")
        expect(frame.get_by_test_id("sign-in")).to_have_count(0)
    finally:
        context.close()
        server.shutdown()


def test_the_metrics_token_gets_only_the_read_only_overview(gateway, page):
    key = new_key(gateway, user="overview")["secret"]
    assert gateway.chat(key)[0] == 200
    sign_in(page, gateway, METRICS_TOKEN)
    expect(page.get_by_test_id("who")).to_have_attribute("data-role", "metrics")
    assert page.locator("[data-testid=tabs] button").all_inner_texts() == ["Overview"]
    expect(page.get_by_test_id("overview-table")).to_contain_text("Requests")
    shot(page, "03-overview-metrics-token")
    # The dashboard it had stays, and the admin API stays shut to it, reads and writes.
    assert http("GET", gateway.root + "/dashboard", METRICS_TOKEN)[0] == 200
    assert http("GET", gateway.root + "/admin/requests", METRICS_TOKEN)[0] == 401
    status, _, _ = http("POST", gateway.root + "/admin/virtual-keys", METRICS_TOKEN, {"user": "x", "role": "team"})
    assert status == 401


def test_virtual_keys_are_created_searched_edited_and_revoked(gateway, page):
    new_key(gateway, user="someone-else")
    sign_in(page, gateway, tab="virtual-keys")
    form = page.get_by_test_id("vkey-create-form")
    form.get_by_test_id("input-user").fill("bea")
    form.get_by_test_id("input-role").fill("team")
    form.get_by_test_id("input-models").fill("smart")
    form.get_by_test_id("input-budget_per_day").fill("2.5")
    form.get_by_test_id("input-expires_in").fill("30d")
    form.get_by_test_id("vkey-create").click()
    secret = page.get_by_test_id("vkey-secret").inner_text()
    assert secret.startswith("sy-")
    shot(page, "04-virtual-key-created")
    assert gateway.chat(secret)[0] == 200, "the new key works"
    # Shown once: the list shows it masked, and gone once dismissed.
    page.get_by_test_id("vkey-secret-dismiss").click()
    assert secret not in page.content()
    assert secret not in json.dumps(gateway.admin("GET", "/admin/virtual-keys")[2])

    page.get_by_test_id("vkey-search").fill("bea")
    rows = page.locator("[data-testid=vkey-table] tbody tr")
    expect(rows).to_have_count(1)
    row = rows.first
    key_id = row.get_attribute("data-key-id")
    expect(row).to_contain_text("$2.5")

    row.get_by_test_id("vkey-edit").click()
    edit = page.get_by_test_id("vkey-edit-form")
    edit.get_by_test_id("input-requests_per_minute").fill("60")
    edit.get_by_test_id("input-budget_per_month").fill("20")
    edit.get_by_test_id("input-never").check()
    edit.get_by_test_id("vkey-save").click()
    expect(page.get_by_test_id("notice-ok")).to_contain_text("Saved " + key_id)
    shot(page, "05-virtual-key-edited")
    _, _, stored = gateway.admin("GET", f"/admin/virtual-keys/{key_id}")
    assert stored["requests_per_minute"] == 60
    assert stored["budget_per_month"] == 20
    assert stored["budget_per_day"] == 2.5
    assert stored["expires_ms"] is None

    row = page.locator(f"[data-testid=vkey-table] tr[data-key-id='{key_id}']")
    row.get_by_test_id("vkey-revoke").click()
    row.get_by_test_id("vkey-revoke").click()  # the second click confirms
    expect(page.locator(f"[data-testid=vkey-table] tr[data-key-id='{key_id}']")).to_have_attribute("data-state", "revoked")
    shot(page, "06-virtual-key-revoked")
    assert gateway.chat(secret)[0] == 401, "a revoked key is refused at once"


def test_provider_keys_are_added_rotated_rolled_back_and_deleted_without_showing_a_secret(gateway, page):
    sign_in(page, gateway, tab="provider-keys")
    add = page.get_by_test_id("pkey-add-form")
    add.get_by_test_id("input-provider").fill("primary")
    add.get_by_test_id("input-id").fill("main")
    add.get_by_test_id("input-secret").fill(PROVIDER_SECRET)
    add.get_by_test_id("input-expires_in").fill("90d")
    add.get_by_test_id("pkey-add").click()
    row = page.locator("[data-testid=pkey-table] tr[data-provider=primary][data-key-id=main]")
    expect(row).to_have_attribute("data-version", "1")
    expect(row.get_by_test_id("pkey-benched")).to_have_text("no")

    row.get_by_test_id("pkey-rotate").click()
    rotate = page.get_by_test_id("pkey-rotate-form")
    rotate.get_by_test_id("input-secret").fill(ROTATED_SECRET)
    rotate.get_by_test_id("pkey-rotate-save").click()
    expect(row).to_have_attribute("data-version", "2")
    shot(page, "07-provider-key-rotated")
    for secret in (PROVIDER_SECRET, ROTATED_SECRET):
        assert secret not in page.content()
        assert secret not in json.dumps(gateway.admin("GET", "/admin/keys")[2])

    row.get_by_test_id("pkey-rollback").click()
    expect(page.get_by_test_id("notice-ok")).to_contain_text("Rolled primary/main back to version 1")
    expect(row).to_have_attribute("data-version", "1")

    row.get_by_test_id("pkey-delete").click()
    row.get_by_test_id("pkey-delete").click()
    expect(page.locator("[data-testid=pkey-table] tr[data-provider=primary]")).to_have_count(0)
    shot(page, "08-provider-key-deleted")


def test_an_open_breaker_is_shown_and_reset_beside_the_retry_and_hedge_budgets(gateway, page):
    key = new_key(gateway, user="breaker")["secret"]
    gateway.flaky.script({"status": 500}, {"status": 500}, {"status": 500}, {"status": 500})
    for _ in range(2):
        assert gateway.chat(key, "shaky")[0] >= 500
    sign_in(page, gateway, tab="breakers")
    row = page.locator("[data-testid=breaker-table] tr[data-provider=flaky]")
    expect(row).to_have_attribute("data-state", "open")
    expect(page.get_by_test_id("retry-budget")).to_contain_text("20%")
    expect(page.get_by_test_id("hedge-table")).to_contain_text("smart")
    expect(page.get_by_test_id("hedge-table")).to_contain_text("5000ms")
    shot(page, "09-breaker-open")
    gateway.flaky.script({})
    row.get_by_test_id("breaker-reset").click()
    expect(page.get_by_test_id("notice-ok")).to_contain_text("Reset 1 breaker(s) on flaky/wobbly")
    expect(page.locator("[data-testid=breaker-table] tr[data-provider=flaky]")).to_have_attribute("data-state", "closed")
    shot(page, "10-breaker-reset")
    assert gateway.chat(key, "shaky")[0] == 200


def test_the_request_log_filters_opens_attempts_in_order_and_exports_csv(gateway, page):
    created = new_key(gateway, user="logger")
    key, key_id = created["secret"], created["id"]
    gateway.primary.script({"status": 500}, {"status": 500}, {"status": 500})
    status, headers, _ = gateway.chat(key)
    assert status == 200
    fallback_id = headers["x-request-id"]
    gateway.primary.script({})
    assert gateway.chat(key)[0] == 200
    assert gateway.chat("sy-not-a-key")[0] == 401
    gateway.logged(3)

    sign_in(page, gateway, tab="requests")
    filters = page.get_by_test_id("log-filters")
    filters.get_by_test_id("input-key").fill(key_id)
    filters.get_by_test_id("log-search").click()
    expect(page.get_by_test_id("log-results")).to_have_attribute("data-count", "2")
    filters.get_by_test_id("input-outcome").select_option("fallback")
    filters.get_by_test_id("log-search").click()
    expect(page.get_by_test_id("log-results")).to_have_attribute("data-count", "1")
    shot(page, "11-log-filtered")

    page.locator(f"tr[data-request-id='{fallback_id}']").get_by_test_id("log-open").click()
    attempts = page.locator("[data-testid=attempt-table] tbody tr")
    expect(attempts.last).to_contain_text("secondary")
    providers = [attempts.nth(i).locator("td").nth(2).inner_text() for i in range(attempts.count())]
    assert providers[0] == "primary" and providers[-1] == "secondary", providers
    assert [attempts.nth(i).get_attribute("data-failure") for i in range(attempts.count())][-1] == ""
    shot(page, "12-log-attempts")

    # Status and time: the 401 is found by status, and nothing is in a window in the future.
    filters.get_by_test_id("input-key").fill("")
    filters.get_by_test_id("input-outcome").select_option("")
    filters.get_by_test_id("input-status").fill("401")
    filters.get_by_test_id("log-search").click()
    expect(page.locator("[data-testid=log-table] tbody tr[data-status='401']")).not_to_have_count(0)
    expect(page.locator("[data-testid=log-table] tbody tr:not([data-status='401'])")).to_have_count(0)
    filters.get_by_test_id("input-status").fill("")
    filters.get_by_test_id("input-since").fill("2099-01-01T00:00:00")
    filters.get_by_test_id("log-search").click()
    expect(page.get_by_test_id("log-results")).to_have_attribute("data-count", "0")
    filters.get_by_test_id("input-since").fill("")

    filters.get_by_test_id("input-key").fill(key_id)
    with page.expect_download() as download:
        filters.get_by_test_id("log-export").click()
    lines = pathlib.Path(download.value.path()).read_text().strip().splitlines()
    assert lines[0].startswith("id,time,time_ms,key_id,user,route,outcome,status")
    assert len(lines) == 3
    assert any(line.startswith(fallback_id + ",") and ",fallback,200," in line for line in lines)
    (ARTIFACTS / "requests.csv").write_text("\n".join(lines) + "\n")


def test_spend_shows_each_key_and_role_against_its_budgets(gateway, page):
    created = new_key(gateway, user="spender", budget_per_day=1)
    for _ in range(2):
        assert gateway.chat(created["secret"])[0] == 200
    gateway.logged(2)
    sign_in(page, gateway, tab="spend")
    row = page.locator(f"[data-testid=spend-keys] tr[data-key-id='{created['id']}']")
    expect(row).to_contain_text("$1")
    day = row.get_by_test_id("spend-day").inner_text()
    assert day.startswith("$") and float(day[1:]) > 0, day
    assert row.locator("meter").count() == 2
    expect(page.locator("[data-testid=spend-roles] tr[data-role=team]")).to_contain_text("$5")
    shot(page, "13-spend")


def test_the_config_is_shown_redacted_and_a_bad_reload_shows_its_error(gateway, page):
    sign_in(page, gateway, tab="config")
    text = page.get_by_test_id("config-text").inner_text()
    assert "proxied" in text and "***@127.0.0.1:9" in text
    for secret in (URL_PASSWORD, METRICS_TOKEN, ADMIN_TOKEN, MASTER_KEY):
        assert secret not in page.content()
    shot(page, "14-config")

    gateway.file.write_text(gateway.text.replace('cooldown = "10m"', 'cooldown = "10m"\nfailure_rate = 2.0'))
    try:
        page.get_by_test_id("config-reload").click()
        expect(page.get_by_test_id("notice-error")).to_contain_text("nothing was changed")
        expect(page.get_by_test_id("reload-fields")).to_contain_text("breaker.failure_rate")
        shot(page, "15-config-reload-refused")
    finally:
        gateway.file.write_text(gateway.text)
    page.get_by_test_id("config-reload").click()
    expect(page.get_by_test_id("notice-ok")).to_contain_text("Reloaded")
