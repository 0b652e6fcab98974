"""``make help`` (the Makefile's first target, so a bare ``make``): one line per target.

Each line gives the target, what it writes (the ``## `` comment on its rule line) and its
time on an idle machine, read at help time from the current rows of docs/performance.md's
"Command times" table: the times live in that table alone. Standard library only, run as a
file (``python3 fraq/_make_help.py``), so it works before the set-up has made ``.venv``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def targets(makefile: str) -> dict[str, str]:
    """Target -> its ``## `` description, in the Makefile's order (variables are not targets)."""
    out = {}
    for line in makefile.splitlines():
        m = re.match(r"([A-Za-z][\w-]*):(?![=:])[^#]*(?:##\s*(.*))?$", line)
        if m:
            out[m.group(1)] = (m.group(2) or "").strip()
    return out


def current_times(page: str) -> dict[str, str]:
    """Target -> its current wall time (the current rows of "Command times", above "History")."""
    section = page.split("## Command times", 1)[1].split("\n## ", 1)[0].split("### History", 1)[0]
    out = {}
    for row in section.splitlines():
        if not row.startswith("| ") or row.startswith("| command |"):
            continue
        command, wall, _, _, date = (c.strip() for c in row.strip().strip("|").split("|"))
        names = re.findall(r"`make ([\w-]+)", command) if command.startswith("`make") else \
            ["setup"] if command.startswith("set-up") else []
        wall = wall.split(" (", 1)[0].replace("**", "")
        parts = wall.split(" / ")
        for name, part in zip(names, parts if len(parts) == len(names) else [wall] * len(names)):
            out[name] = f"{part} ({date})" if date else part
    return out


def main() -> int:
    described = targets((ROOT / "Makefile").read_text(encoding="utf-8"))
    times = current_times((ROOT / "docs" / "performance.md").read_text(encoding="utf-8"))
    width = max(map(len, described))
    print("make TARGET (times on an idle 2-core machine: docs/performance.md, \"Command times\")")
    for name, what in described.items():
        print(f"  {name:<{width}}  {what or '-'}; {times.get(name, 'not measured')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
