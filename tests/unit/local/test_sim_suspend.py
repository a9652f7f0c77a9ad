"""SimulatedCluster and the Job API's suspend rules (batch/v1, 1.30; KEP-2232 and KEP-2926)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from squall.core.errors import NotFoundError, PermanentError

from .sim import CPU_NODE, NS, condition, job_manifest, k8s_job, make_cluster, one_node_cluster, only_pod

pytestmark = pytest.mark.timeout(20)

REGION_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "region", "operator": "In", "values": ["us-west-2"]}]}
            ]
        }
    }
}


def suspended_manifest(name: str, **kwargs: Any) -> dict[str, Any]:
    manifest = job_manifest(name, **kwargs)
    manifest["spec"]["suspend"] = True
    return manifest


def suspended_condition(job: dict[str, Any]) -> tuple[str, str, str]:
    """The status, reason and message of the Job's Suspended condition, which it must have."""
    suspended = condition(job, "Suspended")
    assert suspended is not None
    return suspended["status"], suspended["reason"], suspended["message"]


def resume(cluster: Any, name: str, **spec: Any) -> dict[str, Any]:
    result: dict[str, Any] = cluster.patch_job(
        namespace=NS, name=name, patch={"spec": {"suspend": False, **spec}}
    )
    return result


# ---- created suspended -----------------------------------------------------------------


def test_a_job_created_suspended_gets_no_pod_and_no_start_time() -> None:
    # given
    cluster, clock = one_node_cluster()

    # when
    cluster.create(suspended_manifest("j1"))
    clock.advance(timedelta(hours=5))
    cluster.advance()

    # then
    assert cluster.list_pods(job_id="j1") == []
    job = k8s_job(cluster, "j1")
    assert job["spec"]["suspend"] is True
    assert "startTime" not in job["status"] and "active" not in job["status"]
    assert suspended_condition(job) == ("True", "JobSuspended", "Job suspended")
    # Nothing is due on its own: a virtual clock has nothing to jump to.
    assert cluster.next_event_time() is None
    assert [e.reason for e in cluster.events if e.name == "j1"] == ["Suspended"]


def test_resuming_creates_the_pod_and_sets_start_time_to_the_resume_time() -> None:
    # given
    cluster, clock = one_node_cluster()
    cluster.create(suspended_manifest("j1"))
    clock.advance(timedelta(hours=2))

    # when
    returned = resume(cluster, "j1")
    cluster.advance()

    # then
    assert only_pod(cluster, "j1")["status"]["phase"] == "Running"
    job = k8s_job(cluster, "j1")
    assert job["status"]["startTime"] == "2026-01-05T11:00:00Z"
    assert returned["spec"]["suspend"] is False and returned["status"]["startTime"] == "2026-01-05T11:00:00Z"
    assert suspended_condition(job) == ("False", "JobResumed", "Job resumed")
    assert [e.reason for e in cluster.events if e.kind == "Job" and e.name == "j1"][:3] == [
        "Suspended",
        "Resumed",
        "SuccessfulCreate",
    ]


def test_the_deadline_counts_from_the_resume_not_from_creation() -> None:
    # given: a 1-hour deadline, 3 hours queued, then 50 minutes of work
    cluster, clock = one_node_cluster()
    cluster.set_behaviour("j1", run_for=timedelta(minutes=50))
    cluster.create(suspended_manifest("j1", deadline=3600))
    clock.advance(timedelta(hours=3))
    cluster.advance()

    # when
    resume(cluster, "j1")
    cluster.advance()
    assert cluster.next_event_time() == clock.now() + timedelta(minutes=50)
    clock.advance(timedelta(minutes=50))
    cluster.advance()

    # then: it ran its full time and completed
    job = k8s_job(cluster, "j1")
    assert condition(job, "Complete") is not None and condition(job, "Failed") is None


def test_the_deadline_still_fails_a_job_that_runs_too_long_after_resuming() -> None:
    # given
    cluster, clock = one_node_cluster()
    cluster.set_behaviour("j1", run_for=timedelta(hours=2))
    cluster.create(suspended_manifest("j1", deadline=3600))
    clock.advance(timedelta(hours=3))
    resume(cluster, "j1")
    cluster.advance()

    # when
    clock.advance(timedelta(minutes=59, seconds=59))
    cluster.advance()
    assert condition(k8s_job(cluster, "j1"), "Failed") is None
    clock.advance(timedelta(seconds=1))
    cluster.advance()

    # then
    failed = condition(k8s_job(cluster, "j1"), "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"


# ---- suspending a running Job ----------------------------------------------------------


def test_suspending_a_running_job_deletes_its_pod_and_clears_start_time() -> None:
    # given
    cluster, clock = one_node_cluster()
    cluster.set_behaviour("j1", run_for=timedelta(hours=2))
    cluster.create(job_manifest("j1", deadline=3600))
    cluster.advance()
    assert only_pod(cluster, "j1")["status"]["phase"] == "Running"
    clock.advance(timedelta(minutes=40))

    # when
    cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"suspend": True}})
    cluster.advance()

    # then: no pod, not a failure, no startTime, the node's room is free again
    assert cluster.list_pods(job_id="j1") == []
    job = k8s_job(cluster, "j1")
    assert "startTime" not in job["status"] and "failed" not in job["status"]
    assert suspended_condition(job)[0] == "True"
    assert cluster.next_event_time() is None  # the old deadline and the pod's end are void

    # when: resumed two hours later, the deadline counts from then
    clock.advance(timedelta(hours=2))
    resume(cluster, "j1")
    cluster.advance()
    clock.advance(timedelta(minutes=59))
    cluster.advance()

    # then
    job = k8s_job(cluster, "j1")
    assert condition(job, "Failed") is None
    assert job["status"]["startTime"] == "2026-01-05T11:40:00Z"
    assert only_pod(cluster, "j1")["status"]["phase"] == "Running"


# ---- scheduling directives (KEP-2926) ---------------------------------------------------


def test_scheduling_directives_of_a_suspended_job_change_and_the_pod_follows_them() -> None:
    # given: two nodes; the Job would go anywhere
    cluster, _ = make_cluster()
    cluster.add_node(name="west", allocatable=CPU_NODE, labels={"region": "us-west-2"})
    cluster.add_node(name="east", allocatable=CPU_NODE, labels={"region": "us-east-1"})
    cluster.create(suspended_manifest("j1"))

    # when: admission writes the region and resumes, in one patch
    patched = resume(
        cluster,
        "j1",
        template={
            "metadata": {"annotations": {"squall.io/region": "us-east-1"}},
            "spec": {
                "nodeSelector": {"region": "us-east-1"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    )
    cluster.advance()

    # then
    pod = only_pod(cluster, "j1")
    assert pod["spec"]["nodeName"] == "east"
    assert pod["spec"]["nodeSelector"] == {"region": "us-east-1"}
    template = patched["spec"]["template"]
    assert template["metadata"]["annotations"] == {"squall.io/region": "us-east-1"}
    # The merge kept what the patch did not name.
    assert template["metadata"]["labels"]["squall.io/job-id"] == "j1"
    assert template["spec"]["containers"][0]["name"] == "trainer"


def test_node_affinity_of_a_suspended_job_may_be_set_then_the_job_resumed() -> None:
    # given
    cluster, _ = make_cluster()
    cluster.add_node(name="east", allocatable=CPU_NODE, labels={"region": "us-east-1"})
    cluster.add_node(name="west", allocatable=CPU_NODE, labels={"region": "us-west-2"})
    cluster.create(suspended_manifest("j1"))

    # when
    cluster.patch_job(
        namespace=NS, name="j1", patch={"spec": {"template": {"spec": {"affinity": REGION_AFFINITY}}}}
    )
    assert cluster.list_pods(job_id="j1") == []  # still suspended
    resume(cluster, "j1")
    cluster.advance()

    # then
    assert only_pod(cluster, "j1")["spec"]["nodeName"] == "west"


def test_scheduling_directives_of_a_started_job_are_immutable() -> None:
    # given: running, so status.startTime is set
    cluster, _ = one_node_cluster()
    cluster.create(job_manifest("j1"))
    cluster.advance()
    before = k8s_job(cluster, "j1")

    # when / then
    with pytest.raises(PermanentError) as refused:
        cluster.patch_job(
            namespace=NS, name="j1", patch={"spec": {"template": {"spec": {"nodeSelector": {"region": "x"}}}}}
        )
    message = str(refused.value)
    assert 'Job.batch "j1" is invalid: spec.template.spec.nodeSelector: field is immutable' in message
    assert "suspended" in message and "startTime" in message
    assert k8s_job(cluster, "j1") == before  # nothing changed, not even the resourceVersion


def test_a_suspend_and_a_scheduling_change_in_one_patch_of_a_running_job_is_refused() -> None:
    # The API server judges the Job as stored: running, with a startTime.
    cluster, _ = one_node_cluster()
    cluster.create(job_manifest("j1"))
    cluster.advance()

    with pytest.raises(PermanentError, match=r"spec\.template\.spec\.tolerations: field is immutable"):
        cluster.patch_job(
            namespace=NS,
            name="j1",
            patch={
                "spec": {
                    "suspend": True,
                    "template": {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}},
                }
            },
        )
    assert only_pod(cluster, "j1")["status"]["phase"] == "Running"


def test_a_job_suspended_after_running_has_mutable_scheduling_directives_again() -> None:
    # Suspension clears startTime, so (as Kueue relies on) the directives may change again.
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE, labels={"region": "a"})
    cluster.add_node(name="n2", allocatable=CPU_NODE, labels={"region": "b"})
    cluster.create(job_manifest("j1", node_selector={"region": "a"}))
    cluster.advance()
    assert only_pod(cluster, "j1")["spec"]["nodeName"] == "n1"

    cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"suspend": True}})
    resume(cluster, "j1", template={"spec": {"nodeSelector": {"region": "b"}}})
    cluster.advance()

    assert only_pod(cluster, "j1")["spec"]["nodeName"] == "n2"


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (
            {"spec": {"containers": [{"name": "trainer", "image": "reg.example.com/tf:2"}]}},
            "spec.template.spec.containers",
        ),
        ({"spec": {"priorityClassName": "high"}}, "spec.template.spec.priorityClassName"),
        ({"spec": {"restartPolicy": "OnFailure"}}, "spec.template.spec.restartPolicy"),
        (
            {"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}}},
            "spec.template.spec.affinity.podAffinity",
        ),
        ({"metadata": {"name": "other"}}, "spec.template.metadata.name"),
    ],
)
def test_other_template_changes_are_refused_even_while_suspended(
    template: dict[str, Any], field: str
) -> None:
    # given
    cluster, _ = make_cluster()
    cluster.create(suspended_manifest("j1"))
    before = k8s_job(cluster, "j1")

    # when / then
    with pytest.raises(PermanentError, match=rf'Job.batch "j1" is invalid: {field}: field is immutable'):
        cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"template": template}})
    assert k8s_job(cluster, "j1") == before


def test_immutable_spec_fields_are_refused_by_name() -> None:
    cluster, _ = make_cluster()
    cluster.create(suspended_manifest("j1"))

    with pytest.raises(PermanentError, match=r"spec\.podFailurePolicy: field is immutable"):
        cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"podFailurePolicy": None}})
    with pytest.raises(PermanentError, match=r"spec\.selector: field is immutable"):
        cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"selector": {"matchLabels": {"a": "b"}}}})
    with pytest.raises(PermanentError, match=r"spec\.suspend: Invalid value: 'yes'"):
        cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"suspend": "yes"}})
    with pytest.raises(PermanentError, match=r"metadata\.name: field is immutable"):
        cluster.patch_job(namespace=NS, name="j1", patch={"metadata": {"name": "j2"}})


def test_template_labels_must_still_match_the_selector() -> None:
    cluster, _ = make_cluster()
    cluster.create(suspended_manifest("j1"))

    with pytest.raises(PermanentError, match=r"spec\.template\.metadata\.labels: Invalid value"):
        cluster.patch_job(
            namespace=NS,
            name="j1",
            patch={
                "spec": {"template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": None}}}}
            },
        )


def test_a_template_the_scheduler_cannot_read_is_refused_and_nothing_changes() -> None:
    cluster, _ = make_cluster()
    cluster.create(suspended_manifest("j1"))
    before = k8s_job(cluster, "j1")

    with pytest.raises(PermanentError, match="invalid pod scheduling constraints"):
        cluster.patch_job(
            namespace=NS,
            name="j1",
            patch={
                "spec": {
                    "template": {
                        "spec": {
                            "affinity": {
                                "nodeAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": {
                                        "nodeSelectorTerms": [{"matchExpressions": [{}]}]
                                    }
                                }
                            }
                        }
                    }
                }
            },
        )
    assert k8s_job(cluster, "j1") == before


def test_a_status_in_a_patch_is_ignored_as_the_api_server_ignores_it() -> None:
    cluster, _ = make_cluster()
    cluster.create(suspended_manifest("j1"))

    patched = cluster.patch_job(
        namespace=NS, name="j1", patch={"status": {"startTime": "2020-01-01T00:00:00Z", "succeeded": 1}}
    )

    assert "startTime" not in patched["status"] and "succeeded" not in patched["status"]


def test_patching_a_missing_job_is_not_found_and_the_call_is_recorded() -> None:
    cluster, _ = make_cluster()

    with pytest.raises(NotFoundError):
        cluster.patch_job(namespace=NS, name="nope", patch={"spec": {"suspend": False}})

    assert cluster.calls[-1].method == "patch_job"
    assert cluster.calls[-1].args == {"namespace": NS, "name": "nope", "patch": {"spec": {"suspend": False}}}


def test_patch_job_fails_on_demand_like_every_port_call() -> None:
    cluster, _ = make_cluster()
    cluster.create(suspended_manifest("j1"))
    cluster.fail_calls("patch_job", PermanentError("injected"))

    with pytest.raises(PermanentError, match="injected"):
        resume(cluster, "j1")

    assert cluster.list_pods(job_id="j1") == []  # the failed call changed nothing
    resume(cluster, "j1")
    assert len(cluster.list_pods(job_id="j1")) == 1


def test_a_finished_job_is_not_restarted_by_a_resume() -> None:
    cluster, clock = one_node_cluster()
    cluster.set_behaviour("j1", run_for=timedelta(minutes=1))
    cluster.create(job_manifest("j1"))
    cluster.advance()
    clock.advance(timedelta(minutes=1))
    cluster.advance()
    cluster.patch_job(namespace=NS, name="j1", patch={"spec": {"suspend": True}})

    resume(cluster, "j1")
    cluster.advance()

    pods = cluster.list_pods(job_id="j1")
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"]
    assert condition(k8s_job(cluster, "j1"), "Complete") is not None
