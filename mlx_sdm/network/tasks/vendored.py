"""The task data vendored in the package (``data/``, made by ``scripts/vendor_task_data.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from mlx_sdm.errors import DataError
from mlx_sdm.network.tasks import SourceExample

DATA_DIR = Path(__file__).resolve().parent / "data"


def read_vendored(name: str) -> tuple[list[SourceExample], list[SourceExample]]:
    """(main, shift) examples of a vendored ``data/<name>.jsonl.gz``."""
    path = DATA_DIR / f"{name}.jsonl.gz"
    if not path.is_file():
        raise DataError("the task data is missing from this install; reinstall mlx-sdm (the wheel ships "
                        "mlx_sdm/network/tasks/data/)",
                        path=str(path))
    main, shift = [], []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            extra = {k: v for k, v in row.items() if k not in ("id", "input", "gold", "group")}
            (shift if row["group"] == "shift" else main).append(SourceExample(row["id"], row["input"], row["gold"], extra))
    return main, shift
