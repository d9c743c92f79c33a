"""Write ``lean.json`` for a built verifier from the Table 1 rows of its own ``report.md``.

New builds write ``lean.json`` themselves (mlx_sdm/network/lean.py); this tool measures the leans of a verifier
built before that from the held-out and shifted rows its report already holds. Each row's no-reject cells give
accuracy / admitted fraction per stratum (y=0, y=1, ŷ=0, ŷ=1) over n answers, so the counts are exact:
base_c = frac(y=c)·n, leaned_c = frac(ŷ=c)·n, right_c = acc(ŷ=c)·leaned_c (three decimals, n ≤ 1000).

    .venv/bin/python scripts/write_leans.py weights/smollm2-suite weights/smollm2-suite/members/open_questions
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from mlx_sdm.network.lean import LeanCount, measure_leans, save_leans

ROW = re.compile(r"^\| (?P<task>\S+) (?P<split>held[-_]out|shifted) \((?P<n>\d+)\) \| no-reject \| (?P<cells>.*) \|$")


def _cell(text: str) -> tuple[float | None, float]:
    accuracy, fraction = (part.strip() for part in text.rsplit(" / ", 1))
    return (None if accuracy == "N/A" else float(accuracy)), float(fraction)


def counts_from_report(report: Path) -> dict[str, dict[str, list[LeanCount]]]:
    """{task: {split: [the lean toward 0's counts, toward 1's]}} from a report's no-reject rows."""
    out: dict[str, dict[str, list[LeanCount]]] = {}
    for line in report.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line.strip())
        if match is None or match["task"] == "all":
            continue
        n = int(match["n"])
        y0, y1, p0, p1, _ = (_cell(c) for c in match["cells"].split(" | "))
        counts = []
        for judged, (_, base_fraction), (precision, leaned_fraction) in ((0, y0, p0), (1, y1, p1)):
            leaned = round(leaned_fraction * n)
            right = round((precision or 0.0) * leaned)
            counts.append(LeanCount(match["split"], judged, leaned, right, round(base_fraction * n), n))
        out.setdefault(match["task"], {})[match["split"]] = counts
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verifiers", nargs="+", type=Path, help="verifier folders holding a report.md")
    args = parser.parse_args(argv)
    for folder in args.verifiers:
        report = folder / "report.md"
        if not report.is_file():
            print(f"write_leans: {report} does not exist; give a built verifier's folder", file=sys.stderr)
            return 2
        by_task = counts_from_report(report)
        if not by_task:
            print(f"write_leans: {report} has no per-task held-out rows", file=sys.stderr)
            return 2
        leans = {task: measure_leans(splits) for task, splits in by_task.items()}
        path = save_leans(folder, leans, source=f"Table 1 no-reject rows of {report.name} (scripts/write_leans.py)")
        print(f"wrote {path}")
        for task, by_class in leans.items():
            for judged, lean in by_class.items():
                side = "right" if judged else "wrong"
                print(f"  {task:22s} leans {side:5s}: {'informative' if lean.informative else 'base rate  '} "
                      f"precision {lean.precision if lean.precision is not None else float('nan'):.3f} "
                      f"(lower {lean.lower:.3f}, lowest split {lean.min_lower:.3f}) vs base {lean.base_rate:.3f}, "
                      f"n {lean.leaned}" + (": a word on the badge" if lean.shown else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
