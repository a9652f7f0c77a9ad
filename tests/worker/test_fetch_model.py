"""The model service's `fetch-model` init container (trainer/fetch_model.py), against moto's S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trainer import exits
from trainer.fetch_model import NO_SAVED_MODEL, fetch_model, main, saved_model_part
from trainer.storage import StorageError

BUCKET = "squall"  # created by the s3 fixture
SOURCE = f"s3://{BUCKET}/teams/research/out/job-1"
SAVED_MODEL = {
    "saved_model.pb": b"graph",
    "fingerprint.pb": b"fp",
    "variables/variables.index": b"index",
    "variables/variables.data-00000-of-00001": b"data",
    "assets/vocab.txt": b"a\nb\n",
}


def put(client: Any, prefix: str, files: dict[str, bytes]) -> None:
    for relative, body in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{relative}", Body=body)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("relative", "part"),
    [
        ("saved_model.pb", "saved_model.pb"),
        ("variables/variables.index", "variables/variables.index"),
        ("assets.extra/tf_serving_warmup_requests", "assets.extra/tf_serving_warmup_requests"),
        ("checkpoints/ckpt-1.index", None),  # not part of a SavedModel
        ("variables/../../../etc/passwd", None),  # would land outside the target
        ("variables//x", None),
        ("assets/", None),  # a console folder marker
        ("", None),
    ],
)
def test_only_a_saved_models_parts_are_copied(relative: str, part: str | None) -> None:
    found = saved_model_part(relative)
    assert (found.as_posix() if found is not None else None) == part


def test_the_saved_model_is_copied_whole_and_nothing_else(s3: Any, tmp_path: Path) -> None:
    put(s3, "teams/research/out/job-1", SAVED_MODEL | {"checkpoints/ckpt-1.index": b"c"})
    put(s3, "teams/research/out/job-10", {"saved_model.pb": b"another job's"})  # a sibling prefix
    s3.put_object(Bucket=BUCKET, Key="teams/research/out/job-1/../escape.pb", Body=b"x")
    target = tmp_path / "models" / "digits" / "1"
    target.mkdir(parents=True)
    (target / "stale.pb").write_bytes(b"from an older copy")

    code = main(["--source", SOURCE + "/", "--target", str(target)], termination_log=tmp_path / "absent")

    assert code == exits.OK
    assert tree(target) == SAVED_MODEL
    assert sorted(p.name for p in target.parent.iterdir()) == ["1"]  # no .partial left, nothing outside


def test_no_saved_model_exits_2_with_a_termination_message(s3: Any, tmp_path: Path, capsys: Any) -> None:
    put(s3, "teams/research/out/job-1", {"variables/variables.index": b"index"})
    termination = tmp_path / "termination-log"
    termination.write_text("")

    code = main(["--source", SOURCE, "--target", str(tmp_path / "m")], termination_log=termination)

    assert code == NO_SAVED_MODEL == 2
    assert termination.read_text() == f"no SavedModel at {SOURCE}: no saved_model.pb under it"
    assert capsys.readouterr().err.strip().splitlines()[-1] == termination.read_text()
    assert not (tmp_path / "m").exists()


def test_an_empty_prefix_has_no_saved_model(s3: Any, tmp_path: Path) -> None:
    assert main(["--source", SOURCE, "--target", str(tmp_path / "m")], termination_log=tmp_path / "no") == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "/local/dir", "--target", "t"], "must be an s3:// URI"),
        (["--target", "t"], "usage"),
        (["--source", "s3:///x", "--target", "t"], "no bucket"),
        (["--source", "s3://no-such-bucket/x", "--target", "t"], "no-such-bucket"),
    ],
)
def test_other_failures_exit_1_naming_the_problem(
    s3: Any, tmp_path: Path, capsys: Any, argv: list[str], message: str
) -> None:
    termination = tmp_path / "termination-log"
    termination.write_text("")

    code = main(argv, termination_log=termination)

    assert code == exits.FAILED
    assert message in termination.read_text()
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "fetch failed" and events[-1]["exit_code"] == 1


def test_the_limits_are_clear_errors(s3: Any, tmp_path: Path) -> None:
    put(s3, "teams/research/out/job-1", SAVED_MODEL)

    with pytest.raises(StorageError, match="more than 3 objects"):
        fetch_model(SOURCE, tmp_path / "a", client=s3, max_objects=3)
    with pytest.raises(StorageError, match="larger than 8 bytes"):
        fetch_model(SOURCE, tmp_path / "b", client=s3, max_bytes=8)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
