"""The functions' settings: a JSON file in the asset, beneath the SQUALL_* variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squall.core.settings import SETTINGS_FILE_VARIABLE, Settings, SettingsFileError, settings_file_path


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SQUALL_TEAMS",
        "SQUALL_POLICY",
        "SQUALL_NODE_GROUPS",
        "SQUALL_QUOTAS",
        SETTINGS_FILE_VARIABLE,
        "LAMBDA_TASK_ROOT",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SQUALL_TABLE_NAME", "squall-jobs")


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_the_file_holds_what_the_environment_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = [{"name": f"g{i}", "region": "us-west-2", "asgName": f"asg-{i}", "labels": {"x": "y" * 200}} for i in range(40)]
    path = write(
        tmp_path / "scale.json",
        {"node_groups": groups, "policy": {"maxRuntimeLimit": "P45D"}, "submitters": {"research": ["AROAEXAMPLEROLEID0001"]}},
    )
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, str(path))
    settings = Settings()
    assert len(settings.node_groups) == 40 and settings.table_name == "squall-jobs"
    assert settings.policy.max_runtime_limit.days == 45
    assert settings.submitters == {"research": ["AROAEXAMPLEROLEID0001"]}


def test_a_variable_replaces_the_files_value_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, str(write(tmp_path / "s.json", {"teams": {"a": "team-a", "b": "team-b"}})))
    monkeypatch.setenv("SQUALL_TEAMS", '{"c": "team-c"}')
    assert Settings().teams == {"c": "team-c"}


def test_a_relative_path_starts_at_the_asset_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "squall-settings").mkdir()
    write(tmp_path / "squall-settings" / "submit.json", {"teams": {"a": "team-a"}})
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(tmp_path))
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, "squall-settings/submit.json")
    assert settings_file_path("squall-settings/submit.json") == tmp_path / "squall-settings" / "submit.json"
    assert Settings().teams == {"a": "team-a"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"nodeGroups": []}', "unknown settings nodeGroups"),
    ],
)
def test_a_bad_file_names_the_variable_and_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, message: str
) -> None:
    path = tmp_path / "s.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, str(path))
    with pytest.raises(SettingsFileError, match=message) as caught:
        Settings()
    assert SETTINGS_FILE_VARIABLE in str(caught.value)


def test_team_quotas_reach_the_scale_check_from_the_file_or_a_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.planner.admission import TeamShare

    path = write(
        tmp_path / "scale.json",
        {"teams": {"research": "team-research", "vision": "team-vision"}, "quotas": {"research": {"gpuQuota": 8, "weight": 2}}},
    )
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, str(path))
    # every configured team has a share: one without a quota has none, weight 1
    assert Settings().team_shares() == {"research": TeamShare(quota=8, weight=2.0), "vision": TeamShare()}
    monkeypatch.setenv("SQUALL_QUOTAS", '{"vision": {"gpuQuota": 4}}')
    assert Settings().team_shares() == {"research": TeamShare(), "vision": TeamShare(quota=4)}
    monkeypatch.setenv("SQUALL_QUOTAS", '{"vision": {"gpuQuota": -4, "weight": 0}}')
    with pytest.raises(ValueError, match=r"quotas.vision.gpuQuota: expected a whole number of GPUs.*quotas.vision.weight"):
        Settings()
