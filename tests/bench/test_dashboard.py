"""asv's published dashboard renders offline: its scripts and styles are served from the
published directory (``benchmarks/vendor``, by ``benchmarks.publish``), checked against asv's
own template, and the page opened in a real headless browser that cannot reach any host
but this one lists the benchmarks and draws a graph.

The browser test is slow (it records one asv benchmark, ~20 s) and needs Chromium, its
WebDriver and selenium (the ``bench`` extra); without them it skips with the reason. On
Debian: ``apt-get install -y chromium chromium-driver``.
"""

from __future__ import annotations

import base64
import functools
import glob
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

asv = pytest.importorskip("asv", reason="asv (the bench extra) is not installed")

from benchmarks.publish import CDN, VENDOR, localize, vendor  # noqa: E402

TEMPLATE = os.path.join(os.path.dirname(asv.__file__), "www", "index.html")

SAME_FILE = {"jquery-3.3.1/jquery.min.js", "flot-orderbars-1.0.0/jquery.flot.orderBars.js",
             "blueimp-md5-2.19.0/md5.min.js", "bootstrap-3.1.1/bootstrap.min.js", "bootstrap-3.1.1/bootstrap.min.css"}
"""Copies that are byte for byte the files asv's CDN URLs serve (benchmarks/vendor/README.md)."""


def _template() -> str:
    with open(TEMPLATE, encoding="utf-8") as f:
        return f.read()


def _external(html: str) -> list[str]:
    """Every script or stylesheet the page loads from another host."""
    scripts = re.findall(r"<script\b[^>]*\bsrc=\"(https?://[^\"]+)\"", html)
    styles = [m.group(2) for m in re.finditer(r"<link\b([^>]*)\bhref=\"(https?://[^\"]+)\"", html)
              if "stylesheet" in m.group(0)]
    return scripts + styles


def test_every_cdn_file_of_asvs_template_has_a_vendored_copy():
    html = _template()
    found = _external(html)
    assert found, "asv's template loads nothing from a CDN: benchmarks.publish has nothing to do"
    assert sorted(found) == sorted(CDN)
    local = localize(html)
    assert _external(local) == []
    assert "integrity=" not in local and "crossorigin=" not in local
    for path in re.findall(r"(?:src|href)=\"vendor/([^\"]+)\"", local):
        assert os.path.isfile(os.path.join(VENDOR, path)), path
    for folder in {p.split("/")[0] for p in CDN.values()}:
        licences = glob.glob(os.path.join(VENDOR, folder, "LICENSE*"))
        if not licences:  # flot-orderbars ships none: its licence is stated in the file's header
            with open(os.path.join(VENDOR, folder, os.listdir(os.path.join(VENDOR, folder))[0])) as f:
                assert "MIT license" in f.read(400), f"{folder} has no licence"
    # asv's own scripts and the page's other markup are left as they were
    assert local.count("<script") == html.count("<script") and "asv.js" in local


def test_same_file_copies_match_the_templates_integrity_hashes():
    """The copies said to be the CDN's files have the hashes asv's template pins them to."""
    tags = re.findall(r"(?:src|href)=\"(https?://[^\"]+)\"[^>]*?integrity=\"(sha\d+)-([^\"]+)\"", _template())
    checked = set()
    for url, algorithm, digest in tags:
        path = CDN[url]
        if path not in SAME_FILE:
            continue
        with open(os.path.join(VENDOR, path), "rb") as f:
            got = base64.b64encode(hashlib.new(algorithm, f.read()).digest()).decode()
        assert got == digest, f"{path} is not the file {url} serves"
        checked.add(path)
    assert checked == SAME_FILE


def test_an_unknown_cdn_file_is_refused_with_its_url():
    html = _template().replace("https://code.jquery.com/jquery-3.3.1.min.js", "https://code.jquery.com/jquery-9.js")
    with pytest.raises(ValueError, match="jquery-9.js"):
        localize(html)


def test_vendor_needs_a_published_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="index.html"):
        vendor(str(tmp_path))


# ----------------------------------------------------------------------------- in a browser


def _browser() -> tuple[str, str]:
    """(chromium, chromedriver), or skip naming what is missing."""
    pytest.importorskip("selenium", reason="selenium is not installed (the bench extra)")
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("no Chromium and chromedriver on PATH (Debian: apt-get install -y chromium chromium-driver)")
    return chromium, driver


def _record_and_publish(tmp) -> str:
    """One asv benchmark (Backends.time_run, --quick) of the current tree recorded into ``tmp``
    and published there by ``benchmarks.publish``; asv's machine file is ``tmp``'s own."""
    html = os.path.join(tmp, "html")
    conf = dict(version=1, project="fraq", repo=ROOT, branches=["HEAD"], dvcs="git", environment_type="existing",
                pythons=["same"], benchmark_dir=os.path.join(ROOT, "benchmarks"), env_dir=os.path.join(tmp, "env"),
                results_dir=os.path.join(tmp, "results"), html_dir=html, launch_method="forkserver",
                build_command=[], install_command=[], uninstall_command=[])
    path = os.path.join(tmp, "asv.conf.json")
    with open(path, "w") as f:
        json.dump(conf, f)
    env = dict(os.environ, HOME=str(tmp), PYTHONPATH=ROOT)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    asv_cmd = [sys.executable, "-m", "asv"]
    subprocess.run(asv_cmd + ["machine", "--yes", "--config", path], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    run = subprocess.run(asv_cmd + ["run", "--config", path, "--python=same", "--quick", "--set-commit-hash",
                                    sha.strip(), "-b", r"Backends\.time_run"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    pub = subprocess.run([sys.executable, "-m", "benchmarks.publish", "--config", path], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert pub.returncode == 0, pub.stdout[-3000:] + pub.stderr[-3000:]
    return html


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


DRAWN = """
var plot = $('#main-graph').data('plot');
var canvas = document.querySelector('#main-graph canvas.flot-base');
if (!plot || !canvas) return null;
var points = plot.getData().reduce(function (n, s) { return n + s.data.length; }, 0);
var px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
var inked = 0;
for (var i = 0; i < px.length; i += 4) { if (px[i + 3] > 0 && (px[i] < 200 || px[i + 1] < 200 || px[i + 2] < 200)) inked++; }
return [points, inked];
"""


@pytest.mark.slow
def test_published_dashboard_renders_offline_in_a_browser(tmp_path):
    """Headless Chromium with every host but 127.0.0.1 unresolvable opens the published page
    from a local server: no load failure, the benchmarks listed, a graph drawn with points,
    and every resource the page fetched came from the published directory."""
    chromium, chromedriver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    html = _record_and_publish(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=html))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        driver.get(base + "index.html")
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: d.execute_script("return document.querySelectorAll('.benchmark-container').length"))
        assert "swallow" not in driver.find_element("tag name", "body").text
        listed = driver.execute_script(
            "return Array.from(document.querySelectorAll('.benchmark-text')).map(e => e.textContent)")
        assert "Backends.time_run" in listed and "RankSweep.time_run" in listed, listed[:20]

        driver.get(base + "index.html#bench_recompress.Backends.time_run")
        drawn = wait.until(lambda d: (lambda r: r if r and r[0] > 0 and r[1] > 0 else None)(d.execute_script(DRAWN)))
        points, inked = drawn
        assert points >= 1 and inked > 100, drawn

        fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert any("vendor/jquery-3.3.1/jquery.min.js" in u for u in fetched)
        assert all(u.startswith(base) for u in fetched), [u for u in fetched if not u.startswith(base)]
        # asv asks for every discovered benchmark's summary graph; only the recorded one exists
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"
                  and not re.search(r"/graphs/summary/\S+\.json\S* - Failed to load resource: .* 404", e["message"])]
        assert not errors, errors
    finally:
        driver.quit()
        server.shutdown()


@pytest.mark.slow
def test_republishing_while_asv_preview_serves_keeps_it_serving(tmp_path):
    """``asv preview`` serves from ``html_dir`` as its working directory; ``make bench-publish``
    run again while it serves swaps the new pages into that directory, so the same server
    goes on answering (``asv publish`` alone deletes the directory: the server then fails
    every request on ``os.getcwd()``)."""
    import socket
    import time
    import urllib.request

    html = _record_and_publish(tmp_path)
    path = os.path.join(tmp_path, "asv.conf.json")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=ROOT)
    preview = subprocess.Popen([sys.executable, "-m", "asv", "preview", "--config", path, "--port", str(port)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def get(name: str) -> bytes:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=5) as r:
                    return r.read()
            except ConnectionError:
                time.sleep(0.1)
            except urllib.error.URLError as e:
                if not isinstance(e.reason, ConnectionError):
                    raise
                time.sleep(0.1)
        raise AssertionError("asv preview did not answer")

    try:
        before = json.loads(get("index.json"))
        pub = subprocess.run([sys.executable, "-m", "benchmarks.publish", "--config", path], cwd=ROOT, env=env,
                             capture_output=True, text=True)
        assert pub.returncode == 0, pub.stdout[-3000:] + pub.stderr[-3000:]
        after = json.loads(get("index.json"))
        assert after["benchmarks"].keys() == before["benchmarks"].keys()
        assert b"vendor/jquery-3.3.1/jquery.min.js" in get("index.html")
        assert preview.poll() is None
    finally:
        preview.terminate()
        preview.wait(timeout=10)
