""".sdmkitmodel and .sdmdataset: read where estimator folders and JSONL rows are, written by `train
--out`, `save` and `--export-labels`, and bad or foreign files refused with one clear error."""

import hashlib
import json
import shutil
from pathlib import Path

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.calibration.data import read_embedding_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.sdmdataset import read_bundle, write_bundle
from mlx_sdm.errors import ArtifactError, DataError
from mlx_sdm.store.chat_store import ChatStore

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "reexpress_sdm"


@pytest.fixture
def package(tmp_path):
    target = tmp_path / "m.sdmkitmodel"
    shutil.copytree(FIXTURES / "spam.sdmkitmodel", target)
    return target


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _edit(path: Path, **changes) -> None:
    m = _manifest(path)
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


def test_verify_reads_a_package(package, tmp_path):
    rows = tmp_path / "rows.jsonl"
    x = np.random.default_rng(0).normal(0, 0.05, (5, 384))
    rows.write_text("".join(json.dumps({"id": f"r{i}", "embedding": list(map(float, v))}) + "\n" for i, v in enumerate(x)))
    assert cli(["verify", "--estimator", str(package), str(rows), "--out", str(tmp_path / "v.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(out) == 5 and all({"region_alpha", "region_alpha_lower"} <= set(r) for r in out)


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "manifest.json").unlink(), "no manifest.json"),
    (lambda p: (p / "manifest.json").write_text("{"), "manifest.json is not JSON"),
    (lambda p: _edit(p, schemaVersion=2), "schemaVersion is 2"),
    (lambda p: _edit(p, configuration={**_manifest(p)["configuration"], "distanceMetric": "L2"}), "only 'squaredL2'"),
    (lambda p: _edit(p, regions=[{"alpha": 0.9}]), "field regions must hold"),
    (lambda p: (p / "weights.f32").write_bytes((p / "weights.f32").read_bytes()[:-4]), "weights.f32 has"),
    (lambda p: (p / "support.f32").write_bytes(b"\0" * (p / "support.f32").stat().st_size), "support.f32 does not match"),
    (lambda p: (p / "support.jsonl").unlink(), "no support.jsonl"),
])
def test_bad_packages_get_one_clear_error(package, damage, message):
    damage(package)
    with pytest.raises(ArtifactError, match=message) as info:
        SDMEstimator.load(package)
    assert str(package) in str(info.value)


def test_foreign_support_labels_and_wrong_width(package):
    lines = (package / "support.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["label"] = -99
    lines[0] = json.dumps(first)
    (package / "support.jsonl").write_text("\n".join(lines) + "\n")
    m = _manifest(package)
    m["checksums"]["support.jsonl"] = hashlib.sha256((package / "support.jsonl").read_bytes()).hexdigest()
    (package / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="support.jsonl line 1: field label is -99.*not supported"):
        SDMEstimator.load(package)
    with pytest.raises(ArtifactError, match="embeddingDimension 384"):
        SDMEstimator.load(FIXTURES / "spam.sdmkitmodel", expect_input_dim=16)


def test_a_file_named_like_a_package_and_other_kinds(tmp_path):
    fake = tmp_path / "x.sdmkitmodel"
    fake.write_text("not a folder")
    with pytest.raises(ArtifactError, match="is a file"):
        SDMEstimator.load(fake)


def test_review_labels_join_a_package_support_and_save_back(package, tmp_path):
    est = SDMEstimator.load(package)
    before = est.support_size
    x = np.random.default_rng(1).normal(0, 0.05, (3, 384)).astype(np.float32)
    est.add_support(["review-1", "review-2", "review-3"], x, [0, 1, 1], texts=["a", None, "c"])
    est.save(package)
    again = SDMEstimator.load(package)
    assert again.support_size == before + 3 and again.support_ids[-3:] == ["review-1", "review-2", "review-3"]
    assert _manifest(package)["support"]["count"] == before + 3
    records = [json.loads(line) for line in (package / "support.jsonl").read_text().splitlines()]
    assert records[-3]["document"] == "a" and "document" not in records[-2]
    np.testing.assert_array_equal(again.predict_arrays(x)["q"], est.predict_arrays(x)["q"])


def test_v1_estimator_cannot_be_written_as_a_package(tmp_path):
    from mlx_sdm.calibration.data import LabelledSet
    from mlx_sdm.calibration.fit_config import FitConfig

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 40)
    x = rng.normal(0, 1, (80, 4)) + 3 * y[:, None]
    sets = [LabelledSet([f"{k}{i}" for i in range(40)], x[i::2], y[i::2]) for k, i in (("a", 0), ("b", 1))]
    est = SDMEstimator.fit(*sets, FitConfig(iterations=1, epochs=2, exemplar_dim=4))
    with pytest.raises(ArtifactError, match="cannot be written as .sdmkitmodel"):
        est.save(tmp_path / "v1.sdmkitmodel")
    assert not (tmp_path / "v1.sdmkitmodel").exists()


# ------------------------------------------------------------------------------------ .sdmdataset
def test_dataset_round_trip_and_the_sdk_bundle(tmp_path):
    rows = [{"id": "a", "label": 0, "document": "first"}, {"id": "b", "label": 1}, {"id": "c", "label": 1}]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_bundle(tmp_path / "d.sdmdataset", rows, x, class_names=["n", "p"])
    data = read_embedding_jsonl(tmp_path / "d.sdmdataset")
    assert data.ids == ["a", "b", "c"] and list(data.labels) == [0, 1, 1] and data.texts == ["first", None, None]
    np.testing.assert_array_equal(data.embeddings, x)
    sdk = read_bundle(FIXTURES / "sdk_small.sdmdataset")  # written by `sdm dataset convert`
    assert len(sdk.rows) == 6 and sdk.class_names == ["ham", "spam"] and sdk.embeddings[5] is None
    assert sdk.rows[0]["document"] == "doc 0" and len(sdk.embeddings[0]) == 8
    with pytest.raises(DataError, match="sdk_small.sdmdataset:6: field 'embeddingRow'"):
        read_embedding_jsonl(FIXTURES / "sdk_small.sdmdataset")


def _bundle(tmp_path) -> Path:
    write_bundle(tmp_path / "d.sdmdataset", [{"id": "a", "label": 0}, {"id": "b", "label": 1}],
                 np.ones((2, 3), np.float32))
    return tmp_path / "d.sdmdataset"


def _rewrite_rows(path: Path, rows: list[dict]) -> None:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (path / "rows.jsonl").write_bytes(data)
    m = _manifest(path)
    m["rows"]["sha256"] = hashlib.sha256(data).hexdigest()
    m["rowCount"] = len(rows)
    (path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("damage, message", [
    (lambda p: _edit(p, format="something-else"), "field format is not 'reexpress-dataset'"),
    (lambda p: _edit(p, schemaVersion=3), "schemaVersion is 3"),
    (lambda p: _edit(p, rowCount=5), "rows but rowCount is 5"),
    (lambda p: (p / "rows.jsonl").write_text('{"id": "z", "label": 0}\n{"id": "b", "label": 1}\n'), "SHA-256"),
    (lambda p: _rewrite_rows(p, [{"id": "a", "label": 0, "embeddingRow": 1}, {"id": "b", "label": 1, "embeddingRow": 0}]),
     "embeddingRow 1 out of order"),
    (lambda p: _rewrite_rows(p, [{"id": "a", "label": 0, "embeddingRow": 0}, {"id": "a", "label": 1, "embeddingRow": 1}]),
     "id 'a' already used"),
    (lambda p: _rewrite_rows(p, [{"id": "a", "label": -1, "embeddingRow": 0}, {"id": "b", "label": 1, "embeddingRow": 1}]),
     "every row needs a class label"),
    (lambda p: _rewrite_rows(p, [{"id": "a", "label": "x", "embeddingRow": 0}, {"id": "b", "label": 1, "embeddingRow": 1}]),
     "label must be a class index"),
])
def test_bad_datasets_get_one_clear_error(tmp_path, damage, message):
    path = _bundle(tmp_path)
    damage(path)
    with pytest.raises(DataError, match=message) as info:
        read_embedding_jsonl(path)
    assert str(path) in str(info.value)


def test_a_float64_matrix_is_refused(tmp_path):
    path = _bundle(tmp_path)
    np.save(path / "embeddings.npy", np.ones((2, 3)))
    m = _manifest(path)
    m["matrices"]["embedding"]["sha256"] = hashlib.sha256((path / "embeddings.npy").read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match="must be little-endian float32 '<f4'"):
        read_embedding_jsonl(path)


def test_export_labels_as_a_dataset(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    with pytest.raises(DataError, match="needs at least one row"):
        store.review_queue.export_training_rows(tmp_path / "none.sdmdataset")
    store.review_queue.training_rows = lambda: [{"prompt": "q1", "completion": "a1", "label": 1},
                                                {"prompt": "q2", "completion": "a2", "label": 0}]
    assert store.review_queue.export_training_rows(tmp_path / "labels.sdmdataset") == 2
    bundle = read_bundle(tmp_path / "labels.sdmdataset")
    assert [(r["id"], r["label"], r["prompt"], r["document"]) for r in bundle.rows] == \
        [("review-1", 1, "q1", "a1"), ("review-2", 0, "q2", "a2")]
    assert bundle.class_names == ["unacceptable", "acceptable"] and bundle.embeddings == [None, None]


def test_verify_reads_a_dataset_bundle(package, tmp_path):
    x = np.random.default_rng(2).normal(0, 0.05, (4, 384)).astype(np.float32)
    write_bundle(tmp_path / "rows.sdmdataset", [{"id": f"r{i}", "label": -1} for i in range(4)], x)
    assert cli(["verify", "--estimator", str(package), str(tmp_path / "rows.sdmdataset"),
                            "--out", str(tmp_path / "v.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == ["r0", "r1", "r2", "r3"]
