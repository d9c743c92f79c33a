import os

import pytest

from mlx_sdm.atomic import atomic_directory, atomic_write_text, recover_directory


def test_atomic_directory_replaces_whole_and_is_readable(tmp_path):
    target = tmp_path / "artifact"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("one")
    with atomic_directory(target) as tmp:
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert (target.stat().st_mode & 0o777) == (0o777 & ~umask)


def test_failed_write_keeps_the_old_folder(tmp_path):
    target = tmp_path / "artifact"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("good")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            (tmp / "a.txt").write_text("half")
            raise RuntimeError("killed mid-write")
    assert (target / "a.txt").read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_recover_after_death_between_renames(tmp_path):
    target = tmp_path / "artifact"
    old = tmp_path / "artifact.old"
    old.mkdir()
    (old / "a.txt").write_text("previous")
    recover_directory(target)
    assert (target / "a.txt").read_text() == "previous"


def test_atomic_write_text(tmp_path):
    path = tmp_path / "sub" / "f.json"
    atomic_write_text(path, "{}")
    atomic_write_text(path, '{"a": 1}')
    assert path.read_text() == '{"a": 1}'
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]
