"""Which product made a logged session: the model, verifier, head and embedder, each
with its artifact's checksum, and mlx-sdm's version and git commit.

One typed value, :class:`Provenance`, stored in a session record under ``"provenance"`` (the session
JSONL, :mod:`mlx_sdm.monitor.session_file`). Sessions without it (files written before it existed)
read as provenance unknown. ``mlx-sdm eval-monitor`` prints the provenances of its input and refuses
to score sessions of different provenance together unless told to (:func:`check_single_provenance`).

The checksums (sha256, hex):

- model: the model fingerprint's ``head_sha256`` (the output head's float32 bytes; what verifiers and
  heads are tied to);
- verifier: over the folder's ``verifier.json`` and every file of ``estimator/`` in path order (the
  support set grows with review labels, so a labelled verifier is another verifier);
- head: the manifest's ``low_rank.sha256`` (the shipped low-rank file) or, for a full head, the sha256
  of its weights file;
- embedder: the weights file's sha256 (MiniLM's ``model.safetensors``; the chat model's hidden states:
  the model's checksum).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from mlx_sdm.network.coverage import MEMBERS_DIR

VERIFIER_FILE = "verifier.json"
ESTIMATOR_DIR = "estimator"
HEAD_MANIFEST = "manifest.json"
UNKNOWN = "unknown"
PARTS = ("model", "verifier", "head", "embedder")


@dataclass(frozen=True)
class Artifact:
    """One part of the product: its name (``None`` = not used, e.g. no head) and checksum."""

    name: str | None
    sha256: str | None = None

    def describe(self) -> str:
        if self.name is None:
            return "none"
        return f"{self.name} (sha256 {self.sha256[:12]})" if self.sha256 else f"{self.name} (no checksum)"


@dataclass(frozen=True)
class Provenance:
    model: Artifact
    verifier: Artifact
    head: Artifact
    embedder: Artifact
    version: str
    commit: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # free notes (e.g. the task routing)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "provenance") -> "Provenance":
        """A stored provenance; a malformed one raises ValueError naming ``where`` and the field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: must be an object with {', '.join(PARTS)}, version, commit")
        parts = {}
        for name in PARTS:
            part = data.get(name)
            if not isinstance(part, Mapping) or not all(part.get(k) is None or isinstance(part.get(k), str)
                                                        for k in ("name", "sha256")):
                raise ValueError(f"{where}.{name}: must be an object {{\"name\": str|null, \"sha256\": str|null}}, "
                                 f"got {part!r}")
            parts[name] = Artifact(part.get("name"), part.get("sha256"))
        if not isinstance(data.get("version"), str):
            raise ValueError(f"{where}.version: must be a string (mlx_sdm.__version__), got {data.get('version')!r}")
        return cls(**parts, version=data["version"], commit=data.get("commit"), extra=dict(data.get("extra") or {}))

    def describe(self) -> str:
        product = f"mlx-sdm {self.version}" + (f" @ {self.commit}" if self.commit else "")
        return f"{product}; " + "; ".join(f"{p} {getattr(self, p).describe()}" for p in PARTS)


def describe(provenance: Provenance | None) -> str:
    return "provenance unknown (written before sessions recorded it)" if provenance is None else provenance.describe()


# ----------------------------------------------------------------------------------------------
# checksums of the artifacts


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verifier_sha256(folder: str | Path) -> str:
    """sha256 over ``verifier.json``, ``estimator/*`` and its member verifiers ``members/*`` (path and bytes
    of each, in path order)."""
    folder = Path(folder)
    files = [folder / VERIFIER_FILE] + sorted(p for part in (ESTIMATOR_DIR, MEMBERS_DIR)
                                              for p in (folder / part).rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + bytes.fromhex(file_sha256(path)))
    return digest.hexdigest()


def head_sha256(folder: str | Path) -> str | None:
    """The head's weights checksum as its manifest records it (low-rank) or of its weights file."""
    folder = Path(folder)
    manifest = json.loads((folder / HEAD_MANIFEST).read_text(encoding="utf-8"))
    recorded = (manifest.get("low_rank") or {}).get("sha256")
    if recorded:
        return str(recorded)
    weights = sorted(folder.glob("*.safetensors"))
    return file_sha256(weights[0]) if weights else None


def product_commit(start: str | Path | None = None) -> str | None:
    """The git commit of the checkout mlx-sdm runs from (``+dirty`` with uncommitted tracked changes),
    or None outside a checkout."""
    where = Path(start) if start is not None else Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def embedder_artifact(embedder: Any, model: Artifact) -> Artifact:
    """The TRACER embedder as an :class:`Artifact` (``None`` = no embedder, Jaccard only)."""
    if embedder is None:
        return Artifact(None)
    name = str(getattr(embedder, "name", type(embedder).__name__))
    inner = getattr(embedder, "_model", None)
    model_dir = getattr(inner, "model_dir", None)
    if model_dir is not None and (Path(model_dir) / "model.safetensors").is_file():
        return Artifact(name, file_sha256(Path(model_dir) / "model.safetensors"))
    if name.startswith("hidden:"):
        return Artifact(name, model.sha256)
    return Artifact(name)


def make_provenance(*, model_name: str | None, fingerprint: Mapping[str, Any] | None, verifier_path: str | Path | None,
                    head_path: str | Path | None, embedder: Any, extra: Mapping[str, Any] | None = None) -> Provenance:
    """The provenance of a product loaded from these parts (each checksum read from its files)."""
    import mlx_sdm

    model = Artifact(model_name, (fingerprint or {}).get("head_sha256"))
    verifier = Artifact(None) if verifier_path is None else Artifact(Path(verifier_path).name, verifier_sha256(verifier_path))
    head = Artifact(None) if head_path is None else Artifact(Path(head_path).name, head_sha256(head_path))
    return Provenance(model, verifier, head, embedder_artifact(embedder, model), mlx_sdm.__version__,
                      product_commit(), dict(extra or {}))


# ----------------------------------------------------------------------------------------------
# one provenance per evaluation


@dataclass(frozen=True)
class ProvenanceGroup:
    provenance: Provenance | None
    sessions: int


def provenance_groups(sessions: Iterable[Any]) -> list[ProvenanceGroup]:
    """The distinct provenances of ``sessions`` (each with its session count), in order of appearance."""
    counts: dict[Provenance | None, int] = {}
    for s in sessions:
        counts[s.provenance] = counts.get(s.provenance, 0) + 1
    return [ProvenanceGroup(p, n) for p, n in counts.items()]


class MixedProvenanceError(ValueError):
    pass


def check_single_provenance(groups: list[ProvenanceGroup]) -> None:
    """Raise :class:`MixedProvenanceError` naming two of the provenances when there is more than one."""
    if len(groups) <= 1:
        return
    a, b = groups[0], groups[1]
    raise MixedProvenanceError(
        f"the input mixes sessions made by {len(groups)} different products: {describe(a.provenance)} "
        f"({a.sessions} sessions) and {describe(b.provenance)} ({b.sessions} sessions)"
        + (f" and {len(groups) - 2} more" if len(groups) > 2 else "")
        + "; score each product's sessions separately, or pass --mix-provenance to score them together")
