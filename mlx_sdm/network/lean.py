"""Is a verifier's lean worth saying? (docs/verifiers.md, "When a lean is shown")

A verifier that cannot vouch for an answer still predicts a class: it *leans* toward the answer being right
(ŷ = 1) or wrong (ŷ = 0). That lean carries information only where it predicts better than the base rate:
among held-out answers it leaned toward class c on, the share that really were c (its precision) must beat the
share of c among all of them. On a model whose hidden states barely separate right from wrong, "leans wrong"
is right about as often as saying "wrong" to everything, and saying it would mislead.

The rule: the lean toward class c is **informative** when, on every evaluated split of the task (held out, and
shifted where there is one), the one-sided 95 % Clopper–Pearson lower bound of its precision is above the base
rate of c on that split. Only then, and only for an answer whose nearest known answers support its prediction
(q >= 1, Eq. 5; :attr:`DocumentVerdict.lean_informative`), do the verdict's words say which way it leans, with
the measured precision, and those words stay in the evidence (the evidence view, ``--explain``, the JSON).

A lean is a *word on the badge* ("leans right", "leans wrong") only under a stricter rule: besides being
informative, a person acting on it must be right at least 4 times in 5, the one-sided 95 % lower bound of its
precision at least :data:`LEAN_SHOWN_PRECISION` (0.80) on every split (:attr:`Lean.shown`; ``min_lower`` keeps the
lowest split's bound). A lean measured before ``min_lower`` was kept is never a word on the badge.

The counts are measured when a verifier is built (``build-verifier`` and ``--recipe`` builds write
``lean.json`` beside the estimator) from the same held-out rows as its Table 1 report.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from mlx_sdm.atomic import atomic_write_text

LEAN_FILE = "lean.json"
LEAN_FORMAT_VERSION = 1
#: One-sided confidence of the lower bound on a lean's precision.
LEAN_CONFIDENCE = 0.95
#: The task key of a single-task verifier (no task routing).
ANY_TASK = "*"
#: A lean is a word on the badge ("leans right", "leans wrong") only where a person acting on it is right at least
#: 4 times in 5: the one-sided 95 % lower bound of its precision is at least this on every evaluated split (held out
#: and shifted), besides beating the base rate there (:attr:`Lean.shown`). Below it the lean's numbers stay in the
#: evidence and the badge says "not verified".
LEAN_SHOWN_PRECISION = 0.80


@dataclass(frozen=True)
class LeanCount:
    """One split's counts for the lean toward class ``judged``: ``leaned`` answers were predicted ``judged``, of
    which ``right`` had that label; ``base`` of all ``total`` answers had that label."""

    split: str
    judged: int
    leaned: int
    right: int
    base: int
    total: int

    @property
    def precision(self) -> float | None:
        return self.right / self.leaned if self.leaned else None

    @property
    def base_rate(self) -> float:
        return self.base / self.total if self.total else 0.0

    @property
    def lower(self) -> float:
        """One-sided Clopper–Pearson lower bound of the precision at :data:`LEAN_CONFIDENCE` (0 with no answers)."""
        if not self.leaned or not self.right:
            return 0.0
        from scipy.stats import beta

        return float(beta.ppf(1.0 - LEAN_CONFIDENCE, self.right, self.leaned - self.right + 1))

    @property
    def beats_base_rate(self) -> bool:
        return self.leaned > 0 and self.lower > self.base_rate


@dataclass(frozen=True)
class Lean:
    """What one lean (toward right, ``judged`` = 1, or wrong, 0) is measured to be worth on one task: the figures of
    its first split (held out) for the words, and whether it beat the base rate on every split."""

    judged: int
    informative: bool
    precision: float | None
    base_rate: float
    lower: float
    leaned: int
    splits: tuple[str, ...] = ()
    #: the lowest of the splits' lower bounds (:attr:`LeanCount.lower`); None: not measured (a lean.json written
    #: before it was kept), and then the lean is never a word on the badge
    min_lower: float | None = None

    @property
    def shown(self) -> bool:
        """The lean is worth a word on the badge: it beats the base rate on every split and its precision's lower
        bound is at least :data:`LEAN_SHOWN_PRECISION` on every split (a person acting on it is right at least 4
        times in 5)."""
        return self.informative and self.min_lower is not None and self.min_lower >= LEAN_SHOWN_PRECISION

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "splits": list(self.splits)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Lean | None":
        if not data:
            return None
        precision, min_lower = data.get("precision"), data.get("min_lower")
        return cls(int(data["judged"]), bool(data["informative"]), None if precision is None else float(precision),
                   float(data["base_rate"]), float(data["lower"]), int(data["leaned"]), tuple(data.get("splits") or ()),
                   None if min_lower is None else float(min_lower))

    @classmethod
    def measure(cls, counts: Sequence[LeanCount]) -> "Lean":
        """The rule of the module docstring over one class's counts, split by split (the first one is reported)."""
        if not counts:
            raise ValueError("a lean needs at least one evaluated split")
        first = counts[0]
        return cls(first.judged, all(c.beats_base_rate for c in counts), first.precision, first.base_rate, first.lower,
                   first.leaned, tuple(c.split for c in counts), min(c.lower for c in counts))

    def words(self) -> str:
        """The measured lean in words ("60 % of the 60 held-out answers it leaned right on were right, against 22 % of
        all answers (at least 49 % at 95 % confidence)")."""
        side = "right" if self.judged == 1 else "wrong"
        precision = "n/a" if self.precision is None else f"{100 * self.precision:.0f} %"
        return (f"{precision} of the {self.leaned} held-out answers it leaned {side} on were {side}, against "
                f"{100 * self.base_rate:.0f} % of all answers (at least {100 * self.lower:.0f} % at 95 % confidence)")


def counts_of(split: str, labels: Iterable[int], predictions: Iterable[int]) -> list[LeanCount]:
    """The two classes' counts on one split, from its labels and the verifier's predictions."""
    pairs = [(int(y), int(p)) for y, p in zip(labels, predictions)]
    return [LeanCount(split, c, sum(p == c for _, p in pairs), sum(y == c == p for y, p in pairs),
                      sum(y == c for y, _ in pairs), len(pairs)) for c in (0, 1)]


def measure_leans(splits: Mapping[str, Sequence[LeanCount]]) -> dict[int, Lean]:
    """Both leans of one task from its splits' counts (``{split: counts_of(...)}``)."""
    return {c: Lean.measure([n for counts in splits.values() for n in counts if n.judged == c]) for c in (0, 1)}


def save_leans(directory: str | Path, leans: Mapping[str, Mapping[int, Lean]], *, source: str) -> Path:
    """``lean.json``: per task (:data:`ANY_TASK` for a single-task verifier), both leans; ``source`` says what they
    were measured on."""
    body = {"format_version": LEAN_FORMAT_VERSION, "confidence": LEAN_CONFIDENCE, "source": source,
            "tasks": {task: {str(c): lean.to_dict() for c, lean in by_class.items()} for task, by_class in leans.items()}}
    path = Path(directory) / LEAN_FILE
    atomic_write_text(path, json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path


def load_leans(directory: str | Path) -> dict[str, dict[int, Lean]]:
    """The leans of a verifier folder ({} when it has no ``lean.json``: then no lean is ever said)."""
    path = Path(directory) / LEAN_FILE
    if not path.is_file():
        return {}
    from mlx_sdm.errors import ArtifactError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {task: {int(c): Lean.from_dict(lean) for c, lean in by_class.items()}
                for task, by_class in data["tasks"].items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"{path}: not a lean file ({exc}); delete it (no lean is then said) or rebuild the "
                            "verifier with `mlx-sdm build-verifier`") from None
