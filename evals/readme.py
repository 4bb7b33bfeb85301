"""Regenerate the README's benchmark section from ``evals/results``.

Each benchmark writes ``evals/results/<name>.md`` and ``<name>.json``. The README holds one
block per benchmark between ``<!-- bench:<name> -->`` and ``<!-- /bench:<name> -->``; this
script replaces each block with the results table, the command that produced it and the
machine it ran on, so every number in the README has a command and a results file behind it.

    python -m evals.readme            # rewrite README.md in place
    python -m evals.readme --check    # exit 1 if README.md is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "evals" / "results"
BLOCK = re.compile(r"<!-- bench:(?P<name>[\w-]+) -->\n.*?<!-- /bench:(?P=name) -->", re.S)


def render_block(name: str, results: Path = RESULTS) -> str:
    md_path, json_path = results / f"{name}.md", results / f"{name}.json"
    if not md_path.exists():
        body = f"*No results yet: run `python -m evals.{name}`.*"
    else:
        body = md_path.read_text(encoding="utf-8").strip()
        # the results file's own top-level heading would clash with the README's
        body = re.sub(r"\A# [^\n]*\n+", "", body)
        # nest the results' own headings under the README's "### <benchmark>" heading
        body = re.sub(r"^(#{2,4}) ", r"##\1 ", body, flags=re.MULTILINE)
    meta = {}
    if json_path.exists():
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    machine = meta.get("machine") or {}
    command = meta.get("command") or f"python -m evals.{name}"
    facts = [f"Command: `{command}`"]
    if machine:
        facts.append(
            "machine: " + ", ".join(
                f"{k} {machine[k]}" for k in ("cpu", "cores", "torch", "numpy") if k in machine
            )
        )
    if meta.get("git_commit"):
        facts.append(f"commit `{meta['git_commit'][:10]}`")
    if meta.get("quick"):
        facts.append("**quick mode (smoke run, not the published figures)**")
    return f"<!-- bench:{name} -->\n{'; '.join(facts)}.\n\n{body}\n<!-- /bench:{name} -->"


def regenerate(readme_text: str, results: Path = RESULTS) -> str:
    return BLOCK.sub(lambda m: render_block(m.group("name"), results), readme_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    current = args.readme.read_text(encoding="utf-8")
    fresh = regenerate(current)
    if args.check:
        if fresh != current:
            print("README.md benchmark section is stale: run `python -m evals.readme`")
            return 1
        return 0
    if fresh != current:
        from ctxkit.io.records import atomic_write

        with atomic_write(args.readme) as fh:
            fh.write(fresh)
        print(f"updated {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
