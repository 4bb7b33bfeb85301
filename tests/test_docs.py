"""README, docs/ and ctxkit/ state how things are: no commit hashes, no machine names.

History lives in CHANGELOG.md; docs/benchmarks.md is generated and keeps each run's commit
and machine as provenance. Both are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"docs/benchmarks.md", "CHANGELOG.md"}
# a commit hash: 7 to 40 hex digits with at least one letter and one digit (so neither a
# number like 1073741824 nor an English word like "defaced" matches)
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
MACHINE = re.compile(r"\bIntel\b|\bAMD EPYC\b|\bXeon\b")


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in pages if p.relative_to(ROOT).as_posix() not in GENERATED]


def findings(paths: list[Path], patterns: tuple[re.Pattern, ...]) -> list[str]:
    """``FILE:LINE: match`` for every match of one of ``patterns`` in ``paths``."""
    out = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for pattern in patterns:
                for match in pattern.finditer(line):
                    out.append(f"{path.name}:{number}: {match.group()}")
    return out


def test_the_pages_exist():
    names = {p.relative_to(ROOT).as_posix() for p in _pages()}
    assert {"README.md", "docs/packing.md", "docs/scaling.md"} <= names


def test_no_commit_hash_or_machine_name_in_readme_or_docs():
    assert findings(_pages(), (HASH, MACHINE)) == []


def test_no_machine_name_in_ctxkit_source():
    assert findings(sorted((ROOT / "ctxkit").rglob("*.py")), (MACHINE,)) == []


def test_findings_can_fail(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("fine: 1073741824, 0.9999999, defaced\n"
                    "at 06010f9, with the code of 102d45c, on an AMD EPYC\n", encoding="utf-8")
    assert findings([page], (HASH, MACHINE)) == ["a.md:2: 06010f9", "a.md:2: 102d45c",
                                                 "a.md:2: AMD EPYC"]
