"""asv's dashboard, published so that it renders offline.

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

The page reads its data with XMLHttpRequest, which browsers refuse from ``file://``:
view it through a local server, ``asv preview`` (http://127.0.0.1:8080) or
``python -m http.server -d .asv/html``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
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
    """Move the dashboard published into ``new`` into ``html_dir``, entry by entry, and remove
    ``new``: ``html_dir`` itself stays the same directory, so a server started in it (``asv
    preview`` serves from its working directory) serves the new pages instead of failing on
    a deleted working directory."""
    import shutil

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.publish", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "asv.conf.json"), help="asv configuration file")
    ap.add_argument("--html-dir", default=None, help="output directory (default: the configuration's html_dir)")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.config):
        ap.error(f"--config(={args.config!r}) is not a file")
    args.config = os.path.abspath(args.config)
    from asv.config import Config

    html_dir = os.path.abspath(args.html_dir) if args.html_dir else os.path.join(ROOT, Config.load(args.config).html_dir)
    # published beside it and swapped in (swap_in): a preview serving html_dir keeps working
    os.makedirs(os.path.dirname(html_dir), exist_ok=True)
    fresh = tempfile.mkdtemp(dir=os.path.dirname(html_dir), prefix=f".{os.path.basename(html_dir)}-new-")
    cmd = [sys.executable, "-m", "asv", "publish", "--config", args.config, "--html-dir", fresh]
    print("$", " ".join(cmd), flush=True)
    if subprocess.run(cmd, cwd=ROOT).returncode != 0:
        shutil.rmtree(fresh, ignore_errors=True)
        return 2
    vendor(fresh)
    swap_in(fresh, html_dir)
    print(f"{html_dir}: renders offline (scripts and styles in vendor/); view it with "
          f"`.venv/bin/asv preview` or `python -m http.server -d {os.path.relpath(html_dir)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
