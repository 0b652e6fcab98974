"""The README's measured numbers are copied from the reports they cite, never typed anew: a
number the README quotes after a link to a results folder appears in that folder's README
or report, and the README's headline block is the current reduced-size report's headline,
line for line."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

_LINK = re.compile(r"\]\((docs/results/[^)#]+?/README\.md)\)")
_NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*\.\d+|\d[\d,]*(?=x\b)|\d{3,})(?![\w.])")


def _segments(text: str):
    """(cited file, the text after its link up to the next link or the end of its bullet)."""
    links = list(_LINK.finditer(text))
    for i, m in enumerate(links):
        end = links[i + 1].start() if i + 1 < len(links) else len(text)
        tail = text[m.end():end]
        tail = tail.split("\n- ", 1)[0]  # the bullet ends at the next bullet
        yield m.group(1), tail


def test_numbers_after_a_results_link_are_that_folders():
    checked = 0
    for cited, tail in _segments(README):
        path = ROOT / cited
        assert path.is_file(), f"README cites {cited}, which does not exist"
        source = path.read_text() + "".join(p.read_text() for p in path.parent.glob("report.md"))
        for number in _NUMBER.findall(tail):
            assert number in source, f"README quotes {number} after the link to {cited}; that file does not say it"
            checked += 1
    assert checked >= 10  # the GPU paragraph's numbers at least


def test_readme_headline_is_the_reduced_reports():
    start, end = "<!-- headline: docs/results/reduced/report.md -->", "<!-- /headline -->"
    if start not in README:
        return
    block = README[README.index(start) + len(start):README.index(end)].strip().splitlines()
    report = (ROOT / "docs/results/reduced/report.md").read_text().splitlines()
    head = report[report.index("## Headline") + 2:]
    head = head[:head.index("")]
    assert [s for s in block if s.startswith("- ")] == head, \
        "copy the headline lines of docs/results/reduced/report.md into the README's headline block"
