"""Export Jobs made from the release's export template (the suspended CronJob ``export.jobTemplate``), the way
``kubectl create job --from=cronjob/...`` makes one: the template's Job spec, owned by the CronJob (so an
uninstall removes it), with the iteration to export in ``MILES_HOOKS_EXPORT_ITERATION``.

The Job's name is a function of the run (its submission id) and the iteration: a retried submitter finds the
Job it made (409) and starts no second one; another run's export of the same iteration gets its own Job.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from miles_hooks.core import kube, log
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("export-job")

ITERATION_ENV = "MILES_HOOKS_EXPORT_ITERATION"


def job_name(template: str, submission_id: str, iteration: int) -> str:
    """``<template>-<run hash>-<iteration>``, at most 63 characters (the Job controller's label limit)."""
    run = hashlib.sha256(submission_id.encode()).hexdigest()[:8]
    suffix = f"-{run}-{iteration}"
    return template[: 63 - len(suffix)].rstrip("-") + suffix


def job_from_template(cronjob: dict[str, Any], name: str, iteration: int) -> dict[str, Any]:
    """The Job body: the CronJob's jobTemplate with the iteration set in every container's env."""
    template = copy.deepcopy(cronjob["spec"]["jobTemplate"])
    meta = cronjob["metadata"]
    spec = template.get("spec") or {}
    for container in spec["template"]["spec"]["containers"]:
        env = [e for e in container.get("env") or [] if e.get("name") != ITERATION_ENV]
        container["env"] = [*env, {"name": ITERATION_ENV, "value": str(iteration)}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


def start(api: kube.Api, raw: RawSpec, iteration: int) -> dict[str, Any]:
    """Create the export Job of ``iteration`` for this run; ``created`` False when it exists already."""
    namespace = raw["release"]["namespace"]
    template = raw["export"]["jobTemplate"]
    batch = api.batch()
    with kube.api_call(f"reading the export template CronJob {namespace}/{template}"):
        cronjob = api.to_dict(batch.read_namespaced_cron_job(template, namespace))
    name = job_name(template, raw["submit"]["submissionId"], iteration)
    body = job_from_template(cronjob, name, iteration)
    try:
        with kube.api_call(f"creating the export Job {namespace}/{name}"):
            batch.create_namespaced_job(namespace, body)
    except kube.Conflict:
        LOG.info("the export Job exists already (a retried submitter)", extra={"fields": {"job": name}})
        return {"job": name, "created": False, "iteration": iteration}
    LOG.info(
        "started the export of the run's last checkpoint",
        extra={
            "fields": {"job": name, "iteration": iteration, "logs": f"kubectl logs -n {namespace} job/{name}"}
        },
    )
    return {"job": name, "created": True, "iteration": iteration}
