"""Short-lived pods preflight starts to ask the cluster itself (the kubelet, the scheduler) a question,
watched until each has its answer or the deadline passes, and deleted whatever happens."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from miles_hooks.core import kube
from miles_hooks.core.runspec_types import RawSpec

Judge = Callable[[dict[str, Any]], tuple[str, str]]
DELETED = "deleted"


def run(
    api: kube.Api,
    raw: RawSpec,
    component: str,
    pods: dict[str, dict[str, Any]],
    judge: Judge,
    final: tuple[str, ...],
    timeout: float,
    what: str,
) -> dict[str, tuple[str, str, str]]:
    """Creates ``pods`` (labelled with the release and ``component``: any left by an interrupted earlier run
    go first) and watches them until ``judge`` gives each a state in ``final`` or ``timeout`` passes.
    Returns, for each caller's key, (pod name, state, detail); a pod with no status yet is ("", "no status
    yet"), and one deleted before it answered (evicted, drained, deleted by hand) is ``DELETED``: no answer
    will come, so it is not waited for."""
    # kubernetes is imported on use: the CLI that imports this also runs convert in the miles image
    from kubernetes import watch  # noqa: PLC0415

    namespace = raw["release"]["namespace"]
    selector = f"app.kubernetes.io/instance={raw['release']['name']},app.kubernetes.io/component={component}"
    core = api.core()
    names: dict[str, str] = {}  # pod name -> caller's key
    last: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + timeout

    def decided() -> bool:
        return all(last.get(n, ("",))[0] in (*final, DELETED) for n in names)

    _delete_all(core, namespace, selector, what)
    try:
        for key, body in pods.items():
            with kube.api_call(f"creating the {what} pod {key}"):
                created = core.create_namespaced_pod(namespace, body)
            names[str(created.metadata.name)] = key
        while not decided() and time.monotonic() < deadline:
            w = watch.Watch()
            remaining = max(1, int(deadline - time.monotonic()))
            with kube.api_call(f"watching the {what} pods"):
                for event in w.stream(
                    core.list_namespaced_pod, namespace, label_selector=selector, timeout_seconds=remaining
                ):
                    pod = api.to_dict(event["object"])
                    name = pod["metadata"]["name"]
                    if name not in names or last.get(name, ("",))[0] in final:
                        pass
                    elif event["type"] == "DELETED":
                        node = (pod.get("spec") or {}).get("nodeName") or "no node"
                        last[name] = (DELETED, f"the pod was deleted before it answered (on {node})")
                    else:
                        last[name] = judge(pod)
                    if decided():
                        w.stop()
                        break
    finally:
        _delete_all(core, namespace, selector, what)
    return {key: (name, *last.get(name, ("", "no status yet"))) for name, key in sorted(names.items())}


def _delete_all(core: Any, namespace: str, selector: str, what: str) -> None:
    with kube.api_call(f"listing the {what} pods"):
        names = [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items]
    for name in names:
        kube.optional(
            f"deleting the {what} pod {name}",
            functools.partial(core.delete_namespaced_pod, name, namespace, grace_period_seconds=0),
        )
