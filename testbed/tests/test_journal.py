"""The real node's hook journal: which pods it follows, and the entry it writes for a finished container (the
e2e tier runs it against the real API server and kubelet)."""

from __future__ import annotations

import re
from pathlib import Path

from kubernetes import client

from miles_testbed.journal import HookPodJournal


def pod(node: str, image: str, phase_state: client.V1ContainerState) -> client.V1Pod:
    container = client.V1Container(name="submit", image=image, command=["miles-hooks", "submit"], args=["-v"])
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="miles-submit-x", namespace="ns", uid="u1", labels={"a": "b"}),
        spec=client.V1PodSpec(node_name=node, containers=[container]),
        status=client.V1PodStatus(
            container_statuses=[
                client.V1ContainerStatus(
                    name="submit", image=image, image_id="", ready=False, restart_count=0, state=phase_state
                )
            ]
        ),
    )


def test_the_journal_watches_hook_pods_of_the_real_node_only(tmp_path: Path) -> None:
    written: list[dict[str, object]] = []
    journal = HookPodJournal(
        client.CoreV1Api(),
        tmp_path,
        re.compile("miles-hooks"),
        lambda node: node.startswith("gpu-"),
        written.append,
    )
    waiting = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="ContainerCreating"))
    assert journal.watches(pod("real-cpu-0", "localhost/miles-hooks:testbed", waiting))
    assert not journal.watches(pod("gpu-0001", "localhost/miles-hooks:testbed", waiting))  # a simulated node
    assert not journal.watches(pod("real-cpu-0", "localhost/miles-standin:testbed", waiting))  # a Ray head
    # the convert pod: the miles image, the hooks copied in by an init container of the hooks image
    convert = pod("real-cpu-0", "localhost/miles-standin:testbed", waiting)
    copy = client.V1Container(name="copy-hooks", image="localhost/miles-hooks:testbed")
    assert convert.spec is not None
    convert.spec.init_containers = [copy]
    assert journal.watches(convert)

    terminated = client.V1ContainerStateTerminated(exit_code=3, reason="Error")
    seen = pod("real-cpu-0", "localhost/miles-hooks:testbed", client.V1ContainerState(terminated=terminated))
    journal.first_seen["u1"] = 100.0
    assert seen.spec is not None
    entry = journal.entry(seen, seen.spec.containers[0], terminated, tmp_path / "submit.log", 107.5)
    assert entry == {
        "namespace": "ns",
        "pod": "miles-submit-x",
        "uid": "u1",
        "container": "submit",
        "image": "localhost/miles-hooks:testbed",
        "argv": ["miles-hooks", "submit", "-v"],
        "start": 100.0,
        "end": 107.5,
        "exitCode": 3,
        "reason": "Error",
        "labels": {"a": "b"},
        "log": str(tmp_path / "submit.log"),
        "node": "real-cpu-0",
    }
    assert written == []  # nothing is written before the kubelet reports an end
