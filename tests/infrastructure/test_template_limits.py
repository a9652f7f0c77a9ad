"""Every synthesis measures its templates against CloudFormation's per-stack quotas.

Two synthesised deployments, both with the most teams the settings allow (90) in
two regions: the one a probe found, team names and namespaces of 63 characters (the
longest allowed), whose workloads template is over 1,000,000 bytes, is refused by
``python app.py``; with 50-character names and namespaces every template fits (with
about 2% to spare, so that a small change to what a team adds does not fail it), and
the workloads stack is reported near its limit. The rest measure small fake
templates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stacks import constants
from stacks.limits import TemplateLimitError, check_templates, findings, measure

from .conftest import REPO_ROOT
from .scenario import ACCOUNT, AppRun, Synthesis, large_context

REGIONS = ("us-west-2", "us-east-1")
WORKLOADS = "squall-workloads"
REFUSED_NAME_LENGTH = 63  # the longest team name and namespace the settings allow
FITTING_NAME_LENGTH = 50  # 58 fitted by 918 bytes when this was written; 59 did not


def many_teams_context(ca: str, *, name_length: int) -> dict[str, Any]:
    """``large_context`` in two regions with MAX_TEAMS teams, names and namespaces of ``name_length``."""
    context = large_context(ca)
    context["regions"] = list(REGIONS)
    context["nodeGroups"] = [g for g in context["nodeGroups"] if g["region"] in REGIONS]
    context["capacity"] = {r: c for r, c in context["capacity"].items() if r in REGIONS}
    pad = name_length - 3
    context["teams"] = {
        f"t{i:02d}" + "x" * pad: {
            "namespace": f"n{i:02d}" + "y" * pad,
            "submitters": [f"arn:aws:iam::{ACCOUNT}:role/team-{i}-submitter"],
        }
        for i in range(constants.MAX_TEAMS)
    }
    context["aws:cdk:bundling-stacks"] = []
    return context


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> AppRun:
    """`python app.py` with the probe's settings, passed as the CDK CLI passes context."""
    from tests.certificates import cluster_ca

    workdir = tmp_path_factory.mktemp("cdk-refused")
    context = many_teams_context(cluster_ca(), name_length=REFUSED_NAME_LENGTH)
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(workdir / "cdk.out")}
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return AppRun(result.returncode, result.stderr, workdir / "cdk.out")


@pytest.fixture(scope="module")
def fitting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesis]:
    from app import create_app
    from tests.certificates import cluster_ca

    outdir = tmp_path_factory.mktemp("cdk-fitting")
    context = many_teams_context(cluster_ca(), name_length=FITTING_NAME_LENGTH)
    app, stacks = create_app(context=context, outdir=str(outdir))
    app.synth()
    yield Synthesis(app=app, stacks=stacks, outdir=outdir)


def _paragraph(output: str, stack: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith(f"{stack}:")]
    return line


@pytest.mark.slow
def test_python_app_refuses_the_probes_settings_naming_the_stack_limit_and_settings(refused: AppRun) -> None:
    # given the written template, as CloudFormation would have received it
    size = (refused.outdir / f"{WORKLOADS}.template.json").stat().st_size
    assert size > constants.TEMPLATE_MAX_BYTES
    # then the app exits non-zero with one paragraph, and no traceback
    assert refused.returncode == 2, refused.output
    assert "Traceback" not in refused.output
    message = _paragraph(refused.output, WORKLOADS)
    assert f"{size:,} bytes, over CloudFormation's limit of 1,000,000 bytes per template" in message
    assert "teams (90 teams, names up to 63 characters, namespaces up to 63)" in message
    assert "artifacts.buckets (none)" in message
    assert "90 AWS::IAM::ManagedPolicy" in message
    # and no other stack is blamed
    assert "squall-control-plane:" not in refused.output


@pytest.mark.slow
def test_the_most_teams_with_long_names_synthesise_within_every_limit_and_are_reported_near_it(
    fitting: Synthesis,
) -> None:
    for path in fitting.outdir.glob("*.template.json"):
        template = json.loads(path.read_text())
        assert path.stat().st_size <= constants.TEMPLATE_MAX_BYTES, path.name
        assert len(template["Resources"]) <= constants.TEMPLATE_MAX_RESOURCES, path.name
        assert len(template.get("Outputs", {})) <= constants.TEMPLATE_MAX_OUTPUTS, path.name
    # the check ran in this synthesis, and says the workloads stack has little room left
    (warning,) = [w for w in fitting.app.near_limits if w.startswith(f"{WORKLOADS}: ") and " bytes, " in w]
    assert "of CloudFormation's limit of 1,000,000 per template" in warning
    assert "teams (90 teams, names up to 50 characters" in warning


# -- the measure, on fake templates ----------------------------------------------------


def _template(tmp_path: Path, name: str, **sections: Any) -> Path:
    path = tmp_path / f"{name}.template.json"
    path.write_text(json.dumps(sections, indent=1, ensure_ascii=False))
    return path


def _entries(n: int, value: Any) -> dict[str, Any]:
    return {f"E{i}": value for i in range(n)}


TOPIC = {"Type": "AWS::SNS::Topic"}
OUTPUT = {"Value": "x"}
PARAMETER = {"Type": "String"}
MAPPING = {"k": {"v": "1"}}


@pytest.mark.parametrize(
    ("section", "entry", "limit", "what"),
    [
        ("Resources", TOPIC, constants.TEMPLATE_MAX_RESOURCES, "resources"),
        ("Outputs", OUTPUT, constants.TEMPLATE_MAX_OUTPUTS, "outputs"),
        ("Parameters", PARAMETER, constants.TEMPLATE_MAX_PARAMETERS, "parameters"),
        ("Mappings", MAPPING, constants.TEMPLATE_MAX_MAPPINGS, "mappings"),
    ],
)
def test_one_entry_over_a_section_quota_is_refused_and_the_quota_itself_passes(
    tmp_path: Path, section: str, entry: Any, limit: int, what: str
) -> None:
    # given a template at the quota, and one just over it
    at = _template(tmp_path, "at", **{section: _entries(limit, entry)})
    over = _template(tmp_path, "over", **{section: _entries(limit + 1, entry)})
    # then the one at the quota passes, with a warning
    (warning,) = check_templates({"at": at}, scaling={})
    assert warning.startswith(f"at: {limit:,} {what}, 100.0% of CloudFormation's limit of {limit:,}")
    # and the one over is refused, naming the stack, the count, the limit and what grows it
    with pytest.raises(TemplateLimitError) as refused:
        check_templates({"over": over}, scaling={"over": "teams (3 teams)"})
    (paragraph,) = refused.value.paragraphs
    assert paragraph.startswith("over: CloudFormation would refuse this stack's template: ")
    assert f"{limit + 1:,} {what}, over CloudFormation's limit of {limit:,} {what} per template" in paragraph
    assert "It grows with teams (3 teams)." in paragraph
    assert "\n" not in paragraph


def _padded(tmp_path: Path, name: str, size: int) -> Path:
    """A one-resource template whose file is ``size`` bytes, padded in its description."""
    head, tail = '{"Resources": {"Big": {"Type": "AWS::IAM::ManagedPolicy"}}, "Description": "', '"}'
    path = tmp_path / f"{name}.template.json"
    path.write_text(head + "d" * (size - len(head) - len(tail)) + tail)
    return path


def test_a_template_over_a_million_bytes_is_refused_with_its_largest_parts(tmp_path: Path) -> None:
    # given a template of exactly 1,000,000 bytes, and one a byte longer
    at = _padded(tmp_path, "at", constants.TEMPLATE_MAX_BYTES)
    over = _padded(tmp_path, "over", constants.TEMPLATE_MAX_BYTES + 1)
    assert measure("over", over).size == constants.TEMPLATE_MAX_BYTES + 1
    # then the first passes (near the limit), and the second is refused
    assert [w.split(", ")[0] for w in check_templates({"at": at}, scaling={})] == ["at: 1,000,000 bytes"]
    with pytest.raises(TemplateLimitError) as refused:
        check_templates({"at": at, "over": over}, scaling={})
    (paragraph,) = refused.value.paragraphs
    assert "over: CloudFormation would refuse this stack's template: 1,000,001 bytes" in paragraph
    assert "Largest parts: 1 AWS::IAM::ManagedPolicy (about" in paragraph


def test_the_size_is_the_files_bytes_not_its_characters(tmp_path: Path) -> None:
    path = _template(tmp_path, "s", Description="GPU-Knoten für Teams: ü")
    assert measure("s", path).size == len(path.read_bytes()) > len(path.read_text())


def test_a_small_template_has_no_findings(tmp_path: Path) -> None:
    path = _template(tmp_path, "s", Resources=_entries(3, TOPIC), Outputs=_entries(2, OUTPUT))
    assert findings(measure("s", path)) == []
    assert check_templates({"s": path}, scaling={}) == []


def test_every_stack_over_a_quota_gets_its_own_paragraph(tmp_path: Path) -> None:
    many = _entries(constants.TEMPLATE_MAX_RESOURCES + 1, TOPIC)
    outputs = _entries(constants.TEMPLATE_MAX_OUTPUTS + 1, OUTPUT)
    templates = {
        "a": _template(tmp_path, "a", Resources=many, Outputs=outputs),
        "b": _template(tmp_path, "b", Resources=many),
        "c": _template(tmp_path, "c", Resources=_entries(1, TOPIC)),
    }
    with pytest.raises(TemplateLimitError) as refused:
        check_templates(templates, scaling={"a": "nodeGroups (9 groups)"})
    a, b = refused.value.paragraphs
    assert "501 resources" in a
    assert "; 201 outputs, over" in a
    assert "It grows with nodeGroups (9 groups)." in a
    assert "Largest parts: 501 AWS::SNS::Topic." in a
    assert b.startswith("b: ")
    assert "It grows with" not in b
    assert str(refused.value) == f"{a}\n\n{b}"
