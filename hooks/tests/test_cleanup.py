"""steps/cleanup.py: which pods the pre-delete hook deletes and waits for (the run against a real API
server and KubeRay is tests/e2e: test_real_convert.py, test_lifecycle.py, test_rayjob.py)."""

from __future__ import annotations

from typing import Any

from miles_hooks.steps import cleanup


def pod(component: str, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "labels": {"app.kubernetes.io/component": component}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1]}]
    return {"metadata": meta}


def test_hook_objects_are_the_hooks_but_never_the_cleanup_itself() -> None:
    assert cleanup.is_hook_object(pod("hook-convert"))
    assert cleanup.is_hook_object(pod("hook-test-status"))
    assert not cleanup.is_hook_object(pod("hook-cleanup"))
    assert not cleanup.is_hook_object(pod("ray-worker"))


def test_it_answers_for_its_own_deletions_and_not_for_pods_another_controller_owns() -> None:
    deleted = {"miles-convert"}
    assert cleanup.is_ours(pod("hook-convert", ("Job", "miles-convert")), deleted)
    assert cleanup.is_ours(pod("hook-test-report"), deleted)  # no owner: deleted here directly
    # the RayJob's submitter: its Job is KubeRay's, owned by the RayJob that Helm deletes after this hook;
    # waiting for it would wait out the whole timeout and fail the uninstall
    assert not cleanup.is_ours(pod("hook-submitter", ("Job", "miles-2f9c1a7e")), deleted)
