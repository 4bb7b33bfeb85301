"""Dedup past memory on one machine: the in-memory and the out-of-core ``ctxkit dedup`` on
generated corpora of 1M and 10M records.

``python -m evals.dedup_scale [--quick] [--sizes 1000000,10000000] [--memory 1G]``

**Corpus** (generated to a temporary folder, streamed, seed 0): record ``i`` is drawn from
``random.Random(seed << 40 | i)``, so any record can be drawn again without the others. 70%
are originals: 30-120 words drawn from a 20,000-word vocabulary of random 2-9 letter words
with Zipf-like weights (``1 / (rank + 10)``); 10% are templated: one of 20 two-line heads of
12-20 words, then such a body; 20% are planted near copies of an earlier record (drawn
uniformly among all before it, copies included): 5-15% word edits plus case, whitespace and
punctuation noise (:func:`evals.dedup_corpus._edit`). Truth: a copy belongs to its source's
cluster. About 560 bytes of JSONL per record.

**Runs**: ``ctxkit dedup IN --method exact,minhash -o OUT --report REP`` in a process of its
own per size and path: ``--in-memory`` where the corpus fits (about 7.5 KB per record within
60% of this machine's RAM), ``--out-of-core --memory M`` on every size. Reported: wall time,
records/s and microseconds per record, the process's peak RSS, bytes it wrote (``wchar``:
spill files, output and report), pair precision/recall/F1 of the removed-to-kept links
against the planted truth, and whether the two paths wrote the same records and report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evals._common import command_line, md_table, write_results  # noqa: E402
from evals.dedup_corpus import _edit  # noqa: E402

SIZES = (1_000_000, 10_000_000)
QUICK_SIZES = (4_000, 12_000)
TEMPLATED, COPIES = 0.10, 0.20
BYTES_PER_RECORD_IN_MEMORY = 7_500  # issue 39's measurement of the in-memory path


def vocabulary(seed: int = 0, size: int = 20_000) -> tuple[list[str], list[float]]:
    """Random lower-case words of 2-9 letters, and cumulative Zipf-like weights."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(size)})
    rng.shuffle(words)
    cum, total = [], 0.0
    for rank in range(len(words)):
        total += 1.0 / (rank + 10)
        cum.append(total)
    return words, cum


class Corpus:
    """The generated corpus: :meth:`record` draws record ``i`` and its truth cluster."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.words, self.cum = vocabulary(seed)
        rng = random.Random(seed + 1)
        self.heads = [" ".join(self._words(rng, rng.randint(6, 10))) + "\n"
                      + " ".join(self._words(rng, rng.randint(6, 10))) for _ in range(20)]

    def _words(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cum, k=k)

    def record(self, i: int) -> tuple[str, int]:
        """Record ``i``'s text and the index of the original its cluster grew from."""
        rng = random.Random(self.seed << 40 | i)
        u = rng.random()
        if u < COPIES and i > 0:
            text, root = self.record(rng.randrange(i))
            return _edit(text, rng, self.words, rng.uniform(0.05, 0.15)), root
        body = " ".join(self._words(rng, rng.randint(30, 120)))
        if u < COPIES + TEMPLATED:
            return f"{self.heads[rng.randrange(len(self.heads))]}\n{body}", i
        return body, i

    def write(self, path: Path, n: int) -> np.ndarray:
        """Write ``n`` records as JSONL; returns each record's truth cluster (its root)."""
        roots = np.empty(n, dtype=np.int64)
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(n):
                text, roots[i] = self.record(i)
                fh.write(json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n")
        return roots


def child(args: list[str]) -> None:
    """Run ``ctxkit`` with ``args`` in this process; print its peak RSS and bytes written."""
    from ctxkit.cli import main

    code = main(args)
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    print(json.dumps({"code": code, "maxrss_kb": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss, "wchar": int(io["wchar"])}))


def run_dedup(src: Path, out: Path, rep: Path, mode: list[str]) -> dict[str, Any]:
    """One ``ctxkit dedup`` in a process of its own: wall, peak RSS, bytes written."""
    args = ["dedup", str(src), "--method", "exact,minhash", "-o", str(out), "--report",
            str(rep), "--no-progress", *mode]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "evals.dedup_scale", "--child",
                           json.dumps(args)], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{mode}: {proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if got["code"] != 0:
        raise RuntimeError(f"{mode}: exit {got['code']}: {proc.stdout[-3000:]}")
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(got["maxrss_kb"] / 1024),
            "written_mb": round(got["wchar"] / 2**20)}


def predicted(rep: Path, n: int) -> np.ndarray:
    """Each record's kept record (itself when kept), read from the report a line at a time
    (the report is ``write_json``'s indented layout: an entry's id, then its kept id)."""
    label = np.arange(n, dtype=np.int64)
    rid = None
    with open(rep, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith('      "id": '):
                rid = int(line[12:].strip().strip(',"'))
            elif line.startswith('      "duplicate_of": '):
                label[rid] = int(line[22:].strip().strip(',"'))
    return label


def pair_scores(truth: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Precision, recall and F1 over the pairs of records that share a cluster."""
    def pairs(*labels: np.ndarray) -> int:
        key = labels[0] if len(labels) == 1 else labels[0] * len(truth) + labels[1]
        _, counts = np.unique(key, return_counts=True)
        return int((counts * (counts - 1) // 2).sum())

    both, p, t = pairs(truth, pred), pairs(pred), pairs(truth)
    precision, recall = both / max(p, 1), both / max(t, 1)
    return {"precision": round(precision, 4), "recall": round(recall, 4),
            "f1": round(2 * precision * recall / max(precision + recall, 1e-12), 4)}


def _digest(path: Path, skip_output: bool = False) -> str:
    """SHA-256 of a file (of a report without its ``"output"`` line, which names the file)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for line in fh:
            if not (skip_output and line.startswith(b'  "output": ')):
                h.update(line)
    return h.hexdigest()


def fits_in_memory(n: int) -> bool:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return n * BYTES_PER_RECORD_IN_MEMORY <= 0.6 * total


def one_size(corpus: Corpus, n: int, folder: Path, memory: str) -> dict[str, Any]:
    """Generate ``n`` records and dedup them both ways (in memory only where it fits)."""
    src = folder / f"corpus_{n}.jsonl"
    t0 = time.perf_counter()
    truth = corpus.write(src, n)
    row: dict[str, Any] = {"records": n, "input_mb": round(src.stat().st_size / 2**20),
                           "generate_s": round(time.perf_counter() - t0, 1), "runs": {}}
    print(f"{n:,} records generated in {row['generate_s']} s", file=sys.stderr, flush=True)
    modes = {"out-of-core": ["--out-of-core", "--memory", memory, "--tmp-dir", str(folder)]}
    if fits_in_memory(n):
        modes = {"in-memory": ["--in-memory"], **modes}
    digests = {}
    for name, mode in modes.items():
        out, rep = folder / f"out_{name}.jsonl", folder / f"rep_{name}.json"
        run = run_dedup(src, out, rep, mode)
        run["records_per_s"] = round(n / run["wall_s"])
        run["us_per_record"] = round(1e6 * run["wall_s"] / n, 1)
        run.update(pair_scores(truth, predicted(rep, n)))
        digests[name] = (_digest(out), _digest(rep, skip_output=True))
        row["runs"][name] = run
        print(f"  {name}: {run}", file=sys.stderr, flush=True)
        out.unlink()
        rep.unlink()
    if len(digests) == 2:
        row["identical"] = digests["in-memory"] == digests["out-of-core"]
    src.unlink()
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's checks: per-record time growth, out-of-core over in-memory time, RSS."""
    ooc = [r["runs"]["out-of-core"] for r in rows]
    out: dict[str, Any] = {
        "per_record_growth": round(ooc[-1]["us_per_record"] / ooc[0]["us_per_record"], 3),
        "largest_peak_rss_mb": ooc[-1]["peak_rss_mb"]}
    both = [r for r in rows if "in-memory" in r["runs"]]
    if both:
        r = both[-1]
        out["ooc_over_in_memory"] = {"records": r["records"], "identical": r["identical"],
                                     "time_ratio": round(r["runs"]["out-of-core"]["wall_s"]
                                                         / r["runs"]["in-memory"]["wall_s"], 3)}
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Dedup past memory (out of core)", "", f"Command: `{report['command']}`", "",
             f"`ctxkit dedup IN --method exact,minhash` on generated records ({report['corpus']}), "
             f"each run a process of its own; out of core with `--memory {report['memory']}`.",
             ""]
    rows = []
    for r in report["sizes"]:
        for name, run in r["runs"].items():
            rows.append([f"{r['records']:,}", f"{r['input_mb']:,}", name, f"{run['wall_s']:,.0f}",
                         f"{run['records_per_s']:,}", f"{run['us_per_record']:.0f}",
                         f"{run['peak_rss_mb']:,}", f"{run['written_mb']:,}",
                         f"{run['precision']:.3f}", f"{run['recall']:.3f}", f"{run['f1']:.3f}"])
    lines += [md_table(["records", "input MB", "path", "wall s", "records/s", "us/record",
                        "peak RSS MB", "written MB", "pair P", "pair R", "pair F1"], rows), ""]
    s = report["summary"]
    first, last = report["sizes"][0]["records"], report["sizes"][-1]["records"]
    text = (f"Out of core, time per record at {last:,} records is {s['per_record_growth']:.2f}x "
            f"that at {first:,}; peak RSS at {last:,} is {s['largest_peak_rss_mb']:,} MB.")
    if "ooc_over_in_memory" in s:
        o = s["ooc_over_in_memory"]
        text += (f" At {o['records']:,} records the out-of-core run takes {o['time_ratio']:.2f}x "
                 f"the in-memory time and writes "
                 f"{'the same' if o['identical'] else 'DIFFERENT'} kept records and report.")
    return "\n".join(lines + [text, ""])


def _without_tmp(command: str) -> str:
    """The command without ``--tmp DIR``: where the scratch files went is not what was
    measured (as ``command_line`` leaves out ``--out``).

    Example:
        >>> _without_tmp("python -m evals.dedup_scale --tmp /x --sizes 5")
        'python -m evals.dedup_scale --sizes 5'
    """
    words = command.split(" ")
    if "--tmp" in words:
        del words[words.index("--tmp"):words.index("--tmp") + 2]
    return " ".join(words)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds, for CI smoke tests")
    ap.add_argument("--out", default="evals/results", help="output directory")
    ap.add_argument("--sizes", default=None, help="corpus sizes in records, comma-separated")
    ap.add_argument("--memory", default="1G", help="--memory of the out-of-core runs")
    ap.add_argument("--tmp", default=None, help="folder for corpora and spill files")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        child(json.loads(args.child))
        return None
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(
        QUICK_SIZES if args.quick else SIZES)
    t0 = time.time()
    corpus = Corpus(0)
    with tempfile.TemporaryDirectory(prefix="ctxkit-dedup-scale-", dir=args.tmp) as tmp:
        rows = [one_size(corpus, n, Path(tmp), args.memory) for n in sizes]
    report: dict[str, Any] = {
        "command": _without_tmp(command_line("evals.dedup_scale", argv)), "quick": args.quick,
        "memory": args.memory, "sizes": rows, "summary": summary(rows),
        "corpus": f"30-120 words, {TEMPLATED:.0%} templated, {COPIES:.0%} planted near copies",
        "seconds": round(time.time() - t0, 1)}
    write_results(args.out, "dedup_scale", report, markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
