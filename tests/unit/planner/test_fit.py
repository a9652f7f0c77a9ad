import pytest

from squall.planner import NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration
from squall.planner.fit import (
    affinity_mismatch,
    blocking_taints,
    fit_count,
    requirement_holds,
    resource_shortfall,
    selector_mismatch,
    untolerated_taint,
)

LABELS = {"squall.io/accelerator": "v100", "topology.kubernetes.io/region": "us-west-2", "gpu-count": "8"}


def requirement(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


@pytest.mark.parametrize(
    ("req", "holds"),
    [
        (requirement("squall.io/accelerator", "In", "v100", "a100"), True),
        (requirement("squall.io/accelerator", "In", "a100"), False),
        (requirement("missing", "In", "x"), False),
        (requirement("squall.io/accelerator", "NotIn", "a100"), True),
        (requirement("squall.io/accelerator", "NotIn", "v100"), False),
        (requirement("missing", "NotIn", "x"), True),
        (requirement("squall.io/accelerator", "Exists"), True),
        (requirement("missing", "Exists"), False),
        (requirement("missing", "DoesNotExist"), True),
        (requirement("squall.io/accelerator", "DoesNotExist"), False),
        (requirement("gpu-count", "Gt", "4"), True),
        (requirement("gpu-count", "Lt", "4"), False),
        (requirement("squall.io/accelerator", "Gt", "4"), False),  # not a number: never holds
    ],
)
def test_node_affinity_operators(req: NodeSelectorRequirement, holds: bool) -> None:
    assert requirement_holds(req, LABELS) is holds


def test_affinity_terms_are_alternatives_and_requirements_all_must_hold() -> None:
    # given
    wrong_region = NodeSelectorTerm(
        match_expressions=(
            requirement("squall.io/accelerator", "In", "v100"),
            requirement("topology.kubernetes.io/region", "In", "us-east-1"),
        )
    )
    right = NodeSelectorTerm(match_expressions=(requirement("squall.io/accelerator", "Exists"),))
    # when / then
    assert affinity_mismatch((wrong_region,), LABELS) == (
        "node affinity not satisfied (topology.kubernetes.io/region In [us-east-1])"
    )
    assert affinity_mismatch((wrong_region, right), LABELS) is None
    assert affinity_mismatch((), LABELS) is None


def test_node_selector_needs_every_label_equal() -> None:
    assert selector_mismatch([("squall.io/accelerator", "v100")], LABELS) is None
    assert selector_mismatch([("squall.io/accelerator", "a100")], LABELS) == (
        "node selector squall.io/accelerator=a100 not matched (has v100)"
    )
    assert "label missing" in (selector_mismatch([("team", "a")], LABELS) or "")


GPU_TAINT = Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration(key="nvidia.com/gpu", operator="Exists"), True),
        (Toleration(key="nvidia.com/gpu", operator="Equal", value="true"), True),
        (Toleration(key="nvidia.com/gpu", operator="Equal", value="false"), False),
        (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoExecute"), False),
        (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"), True),
        (Toleration(operator="Exists"), True),  # empty key + Exists tolerates everything
        (Toleration(key="other", operator="Exists"), False),
    ],
)
def test_tolerations(toleration: Toleration, tolerated: bool) -> None:
    untolerated = untolerated_taint((toleration,), (GPU_TAINT,))
    assert (untolerated is None) is tolerated


def test_prefer_no_schedule_never_blocks_and_transient_taints_can_be_ignored() -> None:
    # given
    soft = Taint(key="soft", effect="PreferNoSchedule")
    not_ready = Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule")
    # when
    blocking = blocking_taints((soft, not_ready, GPU_TAINT), ignore_transient=True)
    # then
    assert blocking == (GPU_TAINT,)
    assert untolerated_taint((), (soft,)) is None
    assert blocking_taints((not_ready,), ignore_transient=False) == (not_ready,)


def test_resource_shortfall_names_the_resource_gpu_included() -> None:
    node = (7800, 55 * 2**30, 1, 58)
    assert resource_shortfall((4000, 2**30, 1, 1), node) is None
    assert resource_shortfall((4000, 2**30, 8, 1), node) == (
        "insufficient nvidia.com/gpu (requests 8, node allocatable 1)"
    )
    assert resource_shortfall((8000, 2**30, 0, 1), node) == (
        "insufficient cpu (requests 8, node allocatable 7800m)"
    )
    assert "insufficient memory" in (resource_shortfall((1, 60 * 2**30, 0, 1), node) or "")


def test_fit_count_is_bounded_by_every_resource_including_pods() -> None:
    free = (16000, 64 * 2**30, 8, 5)
    assert fit_count(free, (1000, 2**30, 1, 1)) == 5  # pods per node
    assert fit_count(free, (1000, 2**30, 2, 1)) == 4  # GPUs
    assert fit_count(free, (8000, 2**30, 0, 1)) == 2  # cpu
    assert fit_count(free, (1000, 2**30, 16, 1)) == 0
    assert fit_count((0, 0, 0, -1), (1, 1, 0, 1)) == 0  # overcommitted nodes hold nothing
