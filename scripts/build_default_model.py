"""Build and ship the default fine-tuned model folder (``weights/smollm2-tuned``): ``mlx-sdm finetune --task`` on the
seven suite tasks over the embedded SmolLM2, then the folder copied under ``weights/`` without its work files, its
verifier's open-question member kept as a reference to the one ``weights/smollm2-suite`` ships (one copy).

    .venv/bin/python scripts/build_default_model.py                     # the run (hours on 2 cores; resumable)
    .venv/bin/python scripts/build_default_model.py --ship-only         # ship a finished run

The run's settings are RUN below; the run's report is ``weights/smollm2-tuned/report.md``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

ROOT = Path(__file__).resolve().parents[1]
SUITE = ("bbc_topic", "fever", "sports_understanding", "strategyqa", "truthful_qa", "spam", "sentiment")
#: The shipped run: one adapter set per suite task (each its own run); 240 training rows a task; rank 8 (the time
#: on 2 cores).
RUN = ("--task", *SUITE, "--train-rows", "240", "--lora-ranks", "8")
SHARED_MEMBER = ("open_questions", "smollm2-suite/members/open_questions")


def ship(run: Path, out: Path) -> None:
    """The finished run's folder as it ships (format 2: adapters/<task>/, heads/<task>/, reports/<task>/, the
    verifier with a member per task): no .work, the shared member as a reference."""
    from mlx_sdm.atomic import atomic_directory
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.usecases.model_folder import (ADAPTERS_DIR, HEADS_DIR, MEMBERS_DIR, MODEL_MANIFEST, REPORTS_DIR,
                                               VERIFIER_DIR, read_model_folder)

    folder = read_model_folder(run)  # a finished run only
    with atomic_directory(out) as tmp:
        for name in (ADAPTERS_DIR, HEADS_DIR, REPORTS_DIR):
            if (run / name).is_dir():
                shutil.copytree(run / name, tmp / name)
        shutil.copy2(run / MODEL_MANIFEST, tmp / MODEL_MANIFEST)
        if any(e.verifier for e in folder.entries):
            verifier = DocumentVerifier.load(run / VERIFIER_DIR)
            name, where = SHARED_MEMBER
            if name in verifier.members:
                verifier.member_refs[name] = where
            verifier.save(tmp / VERIFIER_DIR)
            for member in (run / VERIFIER_DIR / MEMBERS_DIR).iterdir():  # each task's member as its run wrote it
                if member.name not in verifier.member_refs:
                    shutil.rmtree(tmp / VERIFIER_DIR / MEMBERS_DIR / member.name, ignore_errors=True)
                    shutil.copytree(member, tmp / VERIFIER_DIR / MEMBERS_DIR / member.name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"shipped {out} ({size / 1e6:.1f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default=str(ROOT / "build" / "smollm2-tuned"), help="the run's folder")
    parser.add_argument("--ship", default="smollm2-tuned", help="the folder name under weights/")
    parser.add_argument("--ship-only", action="store_true", help="ship a finished run without running it")
    args = parser.parse_args()
    if not args.ship_only:
        subprocess.run([sys.executable, "-m", "mlx_sdm", "finetune", *RUN, "--out", args.run], check=True)
    ship(Path(args.run), ROOT / "weights" / args.ship)


if __name__ == "__main__":
    main()
