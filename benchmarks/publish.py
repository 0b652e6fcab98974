"""asv's dashboard, published self-contained: it needs no network, only a local server.

    python -m benchmarks.publish                  # = make bench-publish: .asv/results -> .asv/html
    python -m benchmarks.publish --html-dir DIR --config asv.conf.json

``asv publish`` writes an ``index.html`` that loads jQuery, flot and its plugins,
stupidtable, blueimp-md5 and Bootstrap from three CDNs; without the network (CI, a cluster
node) the page shows only asv's "Can not determine continental origin of swallow" and no
benchmark. This runs ``asv publish``, copies the same libraries from
``benchmarks/vendor`` (at the versions asv's template names, each with its licence; see
``benchmarks/vendor/README.md``) into ``<html_dir>/vendor`` and points every CDN tag of
``index.html`` at its copy, so the directory is self-contained. A tag this module does not
know (a newer asv template) stops it with the URL named, before anything is rewritten.

The page reads its data (``index.json``, ``graphs/*.json``) with XMLHttpRequest, which
browsers refuse from ``file://`` (the page then shows "Error fetching content"): view it
through a local server, ``asv preview`` (http://127.0.0.1:8080) or ``python -m
http.server -d .asv/html``. It is published into a fresh directory beside ``html_dir`` and
swapped in only when complete (:func:`publish`), so a failed publish keeps the old
dashboard and a running ``asv preview`` goes on serving the new one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDOR = os.path.join(ROOT, "benchmarks", "vendor")

CDN = {
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery-3.3.1/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": "flot-0.8.3/jquery.flot.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": "flot-0.8.3/jquery.flot.time.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js":
        "flot-0.8.3/jquery.flot.selection.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js":
        "flot-0.8.3/jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js":
        "flot-orderbars-1.0.0/jquery.flot.orderBars.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js":
        "stupid-table-plugin-1.1.3/stupidtable.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "blueimp-md5-2.19.0/md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "bootstrap-3.1.1/bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "bootstrap-3.1.1/bootstrap.min.css",
}
"""asv 0.6's CDN URL -> its copy under ``benchmarks/vendor``. The copies of jQuery,
flot-orderbars, blueimp-md5 and Bootstrap are the files the URLs serve (the template's
``integrity`` hashes match them); flot 0.8.3's are the same release unminified (npm ships
no minified build) and stupidtable is 1.1.3 (npm has no 1.0.1; the same
``$.fn.stupidtable`` plugin)."""

_TAG = re.compile(r"<(script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"]+)\"[^>]*>", re.S)
_CDN_ONLY = re.compile(r"\s+(?:integrity|crossorigin|referrerpolicy)=\"[^\"]*\"")


def localize(html: str) -> str:
    """``index.html`` with every CDN ``<script>`` / ``<link>`` pointed at ``vendor/``.

    ``integrity``, ``crossorigin`` and ``referrerpolicy`` are dropped from those tags (they
    govern cross-origin fetches; the copies are same-origin). Raises ValueError naming the
    first external script or stylesheet without a copy."""

    def local(match: re.Match) -> str:
        tag, url = match.group(0), match.group(2)
        if url not in CDN:
            raise ValueError(f"index.html loads {url}, which benchmarks/vendor has no copy of "
                             f"(asv's template changed?): add it to benchmarks.publish.CDN")
        return _CDN_ONLY.sub("", tag.replace(url, "vendor/" + CDN[url]))

    external = [m for m in _TAG.finditer(html) if m.group(1) == "script" or "stylesheet" in m.group(0)]
    out, last = [], 0
    for m in external:
        out += [html[last:m.start()], local(m)]
        last = m.end()
    return "".join(out) + html[last:]


def vendor(html_dir: str) -> None:
    """Copy ``benchmarks/vendor`` into ``html_dir/vendor`` and rewrite ``html_dir/index.html``
    to load from it; the page is replaced whole (written beside it, then renamed)."""
    index = os.path.join(html_dir, "index.html")
    if not os.path.isfile(index):
        raise FileNotFoundError(f"html_dir(={html_dir!r}) has no index.html: run asv publish first")
    with open(index, encoding="utf-8") as f:
        html = localize(f.read())
    dest = os.path.join(html_dir, "vendor")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(VENDOR, dest, ignore=shutil.ignore_patterns("README.md"))
    fd, tmp = tempfile.mkstemp(dir=html_dir, prefix=".index-", suffix=".html")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(html)
    os.chmod(tmp, 0o644)
    os.replace(tmp, index)


def swap_in(new: str, html_dir: str) -> None:
    """Replace the contents of ``html_dir`` whole by the dashboard published into ``new``,
    and remove ``new``.

    ``asv preview`` serves from its working directory, which it sets to ``html_dir``
    (``os.chdir`` at start): renaming a fresh directory over ``html_dir`` would leave the
    server in the old, deleted one (``FileNotFoundError`` from ``os.getcwd()`` on the next
    request), as ``asv publish`` itself does by deleting ``html_dir`` first. So
    ``html_dir`` stays the same directory: its old entries are moved into a trash directory
    inside it, the new ones renamed in, then the trash removed. Every step is a rename
    within one file system, so the pages change in one short window, and nothing of the
    old dashboard is left beside the new one."""
    os.makedirs(html_dir, exist_ok=True)
    trash = tempfile.mkdtemp(dir=html_dir, prefix=".old-")
    try:
        for name in os.listdir(html_dir):
            if os.path.join(html_dir, name) != trash:
                os.replace(os.path.join(html_dir, name), os.path.join(trash, name))
        for name in os.listdir(new):
            os.replace(os.path.join(new, name), os.path.join(html_dir, name))
    finally:
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(new, ignore_errors=True)


def publish(config: str, html_dir: str) -> None:
    """``asv publish`` into a fresh directory beside ``html_dir``, made self-contained
    (:func:`vendor`), then swapped into ``html_dir`` (:func:`swap_in`).

    Nothing in ``html_dir`` changes until the new dashboard is complete: a failing ``asv
    publish`` (RuntimeError with its exit status) or a template this module cannot vendor
    (ValueError naming the URL) leaves the old dashboard as it was, and the fresh directory
    is removed."""
    parent = os.path.dirname(html_dir)
    os.makedirs(parent, exist_ok=True)
    fresh = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(html_dir)}-new-")
    try:
        cmd = [sys.executable, "-m", "asv", "publish", "--config", config, "--html-dir", fresh]
        print("$", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        if rc != 0:
            raise RuntimeError(f"asv publish exited with status {rc}; {html_dir} is unchanged")
        vendor(fresh)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    swap_in(fresh, html_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.publish", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "asv.conf.json"), help="asv configuration file")
    ap.add_argument("--html-dir", default=None, help="output directory (default: the configuration's html_dir)")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.config):
        ap.error(f"--config(={args.config!r}) is not a file")
    args.config = os.path.abspath(args.config)
    if args.html_dir:
        html_dir = os.path.abspath(args.html_dir)
    else:
        from asv.config import Config

        html_dir = os.path.join(ROOT, Config.load(args.config).html_dir)
    named = re.search(r'"results_dir"\s*:\s*"([^"]*)"', Path(args.config).read_text())  # asv's default: results
    results = os.path.join(os.path.dirname(args.config), named.group(1) if named else "results")
    if not os.path.isfile(os.path.join(results, "benchmarks.json")):  # before asv says it in its own words
        print(f"error: nothing to publish: {os.path.relpath(results)} holds no asv results yet; `make bench-quick` "
              f"(one sample of each benchmark, minutes) or `make bench` records them", file=sys.stderr)
        return 2
    try:
        publish(args.config, html_dir)
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{html_dir}: self-contained (scripts and styles in vendor/); its pages load JSON, so view it through "
          f"a local server: `.venv/bin/asv preview` or `python -m http.server -d {os.path.relpath(html_dir)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
