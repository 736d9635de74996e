"""Build charts/miles/values.schema.json from values.yaml plus the constraints below.

    python3 ci/values_schema_gen.py          # rewrite the schema
    python3 ci/values_schema_gen.py --check  # exit 1 when the committed schema is stale

Types come from the defaults in values.yaml; enums, patterns, minimums and references to the shared
definitions come from OVERRIDES and the key-name rules in node(). Every chart-defined object gets
additionalProperties: false. Kubernetes' own shapes come from the pinned upstream sources through
ci/k8s_shapes.py: the objects passed through to pods (tolerations, affinity, security contexts, env,
volumes, NetworkPolicy peers) are the API's definitions, strict; label keys and values, annotation keys,
resource names, DNS subdomains and Secret keys use apimachinery's formats and length limits. What those
cannot express (an Exists toleration with a value, a request above its limit) is in _validate.tpl.
"""

import json
import pathlib
import sys

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import k8s_shapes

CHART = pathlib.Path(__file__).resolve().parents[1] / "charts" / "miles"
vals = yaml.safe_load((CHART / "values.yaml").read_text())


def api(name):
    """An API definition as the values schema embeds it: strict, descriptions dropped (size)."""

    def strip(n):
        if isinstance(n, dict):
            return {k: strip(v) for k, v in n.items() if k != "description" or not isinstance(v, str)}
        if isinstance(n, list):
            return [strip(v) for v in n]
        return n

    kind = name.rsplit(".", 1)[-1]
    schema = strip(k8s_shapes.api_schema(name))
    return {"description": f"Kubernetes {kind} (k8s.io/kubernetes swagger)", **schema}


# keys as patternProperties, not propertyNames: Helm's validator reports a propertyNames failure at a
# wrong location, an additional property at the right one
LABEL_KEY = k8s_shapes.label_key_schema()["pattern"]
toleration = api("io.k8s.api.core.v1.Toleration")
# the values the API's description lists (TolerationOperator / TaintEffect are not enums in the swagger)
toleration["properties"]["operator"]["enum"] = ["Exists", "Equal"]
toleration["properties"]["effect"]["enum"] = ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]
env_var = api("io.k8s.api.core.v1.EnvVar")
env_var["required"] = ["name"]
env_var["properties"]["name"] = k8s_shapes.env_var_name_schema()
defs = {
    "quantity": k8s_shapes.quantity_schema(),
    "prometheusDuration": k8s_shapes.prometheus_duration_schema(),
    "resourceMap": {
        "type": "object",
        "patternProperties": {LABEL_KEY: {"$ref": "#/definitions/quantity"}},
        "additionalProperties": False,
    },
    "resources": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "requests": {"$ref": "#/definitions/resourceMap"},
            "limits": {"$ref": "#/definitions/resourceMap"},
        },
    },
    "labels": {
        "type": "object",
        "description": "label keys and values as the API server accepts them (apimachinery formats)",
        "patternProperties": {LABEL_KEY: k8s_shapes.label_value_schema()},
        "additionalProperties": False,
    },
    "toleration": toleration,
    "tolerations": {"type": "array", "items": {"$ref": "#/definitions/toleration"}},
    "envVar": env_var,
    "env": {"type": "array", "items": {"$ref": "#/definitions/envVar"}},
    "affinity": api("io.k8s.api.core.v1.Affinity"),
    "securityContext": api("io.k8s.api.core.v1.SecurityContext"),
    "podSecurityContext": api("io.k8s.api.core.v1.PodSecurityContext"),
    "volumes": {"type": "array", "items": api("io.k8s.api.core.v1.Volume")},
    "volumeMounts": {"type": "array", "items": api("io.k8s.api.core.v1.VolumeMount")},
    "networkPolicyPeers": {"type": "array", "items": api("io.k8s.api.networking.v1.NetworkPolicyPeer")},
    "extendedResource": k8s_shapes.extended_resource_schema(),
    "dnsSubdomainOrEmpty": k8s_shapes.dns_subdomain_or_empty_schema(),
    "secretKey": k8s_shapes.config_key_schema(),
    "annotations": {
        "type": "object",
        "patternProperties": {LABEL_KEY: {"type": "string"}},
        "additionalProperties": False,
    },
    "hookAnnotations": {
        "type": "object",
        "patternProperties": {LABEL_KEY: {"type": "string"}},
        "additionalProperties": False,
        "anyOf": [{"required": ["helm.sh/hook"]}, {"required": ["argocd.argoproj.io/hook"]}],
        "description": "annotations of a hook object; must name its phase, as Helm hook events "
        "(helm.sh/hook) or as an Argo CD hook (argocd.argoproj.io/hook, with the helm.sh keys set to null)",
    },
    "image": {
        "type": "object",
        "additionalProperties": False,
        "required": ["repository"],
        "properties": {
            "repository": {
                "type": "string",
                "minLength": 1,
                "pattern": "^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?$",
            },
            "tag": {
                "type": "string",
                "pattern": "^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$",
            },
            "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
            "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        },
    },
}
# a command line: at least the program, no empty word
ARGV = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
OVERRIDES = {
    "nameOverride": {
        "type": "string",
        "pattern": "^([a-z]([-a-z0-9]*[a-z0-9])?)?$",
        "maxLength": 53,
    },
    "fullnameOverride": {
        "type": "string",
        "pattern": "^([a-z]([-a-z0-9]*[a-z0-9])?)?$",
        "maxLength": 53,
    },
    "mode": {"enum": ["rayCluster", "rayJob", "singleNode"]},
    "cluster.preset": {"enum": ["eks", "hyperpod", "generic"]},
    "image": {"$ref": "#/definitions/image"},
    "hooks.image": {"$ref": "#/definitions/image"},
    "reward.image": {"$ref": "#/definitions/image"},
    "imagePullSecrets": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "model.repoId": {
        "type": "string",
        "pattern": "^[A-Za-z0-9][-A-Za-z0-9_.]*/[-A-Za-z0-9_.]+$",
    },
    "model.revision": {"type": "string", "minLength": 1},
    "model.profile": {
        "type": "string",
        "minLength": 1,
        "pattern": "^[A-Za-z0-9][-A-Za-z0-9_.]*$",
    },
    "model.trainBackend": {"enum": ["megatron"]},
    "model.parameterCount": {"type": "integer", "minimum": 0},
    "model.architecture": {
        "type": "object",
        "additionalProperties": False,
        "description": "all four keys, or none (the chart's table of known profiles)",
        "anyOf": [
            {"maxProperties": 0},
            {"required": ["numLayers", "numAttentionHeads", "numQueryGroups", "numExperts"]},
        ],
        "properties": {
            "numLayers": {"type": "integer", "minimum": 1},
            "numAttentionHeads": {"type": "integer", "minimum": 1},
            "numQueryGroups": {"type": "integer", "minimum": 1},
            "numExperts": {"type": "integer", "minimum": 0},
        },
    },
    "topology.expertTensorParallel": {"type": "integer", "minimum": 0},
    "data.evalData": {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "path"],
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
                "path": {"type": "string", "minLength": 1},
            },
        },
    },
    "data.datasets": {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["repoId", "revision", "files", "path"],
            "properties": {
                "repoId": {
                    "type": "string",
                    "pattern": "^[A-Za-z0-9][-A-Za-z0-9_.]*/[-A-Za-z0-9_.]+$",
                },
                "revision": {"type": "string", "minLength": 1},
                "files": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "minLength": 1},
                },
                "path": {"type": "string", "minLength": 1},
            },
        },
    },
    "data.inputKey": {"type": "string", "minLength": 1},
    "data.labelKey": {"type": "string", "minLength": 1},
    "recipe.entrypoint": {"enum": ["train.py", "train_async.py"]},
    "recipe.rolloutTemperature": {"type": "number", "minimum": 0},
    "recipe.lr": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?([eE]-?[0-9]+)?$"},
    "recipe.lrDecayStyle": {"enum": ["constant", "linear", "cosine", "inverse-square-root", "WSD"]},
    "recipe.checkpoint.resumeSchedule": {"enum": ["values", "checkpoint"]},
    "recipe.weightDecay": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?([eE]-?[0-9]+)?$"},
    "recipe.adamBeta2": {"type": "string", "pattern": "^0?\\.[0-9]+$"},
    "recipe.dropout": {"type": "string", "pattern": "^(0?\\.[0-9]+|0)$"},
    "recipe.epsClipHigh": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"},
    "recipe.sglangMoeRunnerBackend": {"type": "string", "pattern": "^[a-z0-9_]*$"},
    "recipe.memory.recompute": {"enum": ["none", "selective", "full"]},
    "recipe.checkpoint.bytesPerParameter": {"type": "integer", "minimum": 1},
    "recipe.advantageEstimator": {
        "type": "string",
        "enum": [
            "grpo",
            "gspo",
            "reinforce_plus_plus",
            "reinforce_plus_plus_baseline",
            "ppo",
        ],
    },
    "recipe.maxTokensPerGpu": {"type": "integer", "minimum": 0},
    "recipe.evalInterval": {"type": "integer", "minimum": 0},
    "recipe.sglangMemFractionStatic": {"type": "string", "pattern": "^0?\\.[0-9]+$"},
    "recipe.sglangLogLevel": {"enum": ["debug", "info", "warning", "error", "critical"]},
    # the rule-based and remote types miles' rm_hub dispatches on (miles/rollout/rm_hub/__init__.py)
    "recipe.reward.type": {
        "type": "string",
        "pattern": "^(boxed_)?(remote_rm|deepscaler|dapo|math|f1|gpqa|ifbench|random)$",
    },
    "recipe.reward.url": {"type": "string", "pattern": "^(https?://.+)?$"},
    "recipe.tracking.wandb.project": {"type": "string"},
    "recipe.extraArgs": {"type": "array", "items": {"type": ["string", "number"]}},
    "recipe.extraEnv": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
    },
    "output.dir": {"type": "string", "pattern": "^[^\\s]*$"},
    "storage.mountPath": {"type": "string", "pattern": "^/[^\\s]*$"},
    "storage.type": {"enum": ["existingClaim", "fsxStatic", "fsxDynamic"]},
    "storage.existingClaim": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "storage.fsxStatic.fileSystemId": {
        "type": "string",
        "pattern": "^(fs-[0-9a-f]{8,17})?$",
    },
    "storage.fsxStatic.capacity": {"$ref": "#/definitions/quantity"},
    "storage.fsxStatic.mountOptions": {"type": "array", "items": {"type": "string"}},
    "storage.fsxDynamic.subnetId": {
        "type": "string",
        "pattern": "^(subnet-[0-9a-f]{8,17})?$",
    },
    "storage.fsxDynamic.securityGroupIds": {
        "type": "array",
        "items": {"type": "string", "pattern": "^sg-[0-9a-f]{8,17}$"},
    },
    "storage.fsxDynamic.deploymentType": {"enum": ["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]},
    "storage.fsxDynamic.perUnitStorageThroughput": {"enum": [50, 100, 125, 200, 250, 500, 1000]},
    "storage.fsxDynamic.capacity": {"$ref": "#/definitions/quantity"},
    "storage.fsxDynamic.reclaimPolicy": {"enum": ["Retain", "Delete"]},
    "secrets.huggingface.existingSecret": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "secrets.wandb.existingSecret": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "networkPolicy.egress.blockedCidrs": {
        "type": "array",
        "items": k8s_shapes.blocked_cidr_schema(),
    },
    "secrets.rayAuth.existingSecret": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "secrets.rayAuth.key": {"anyOf": [{"const": ""}, {"$ref": "#/definitions/secretKey"}]},
    "secrets.huggingface.key": {"$ref": "#/definitions/secretKey"},
    "secrets.wandb.key": {"$ref": "#/definitions/secretKey"},
    "secrets.extra": {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "key", "env"],
            "properties": {
                "name": {"allOf": [{"$ref": "#/definitions/dnsSubdomainOrEmpty"}, {"minLength": 1}]},
                "key": {"$ref": "#/definitions/secretKey"},
                "env": k8s_shapes.env_var_name_schema(),
                "required": {"type": "boolean"},
            },
        },
    },
    "rayCluster.name": {"type": "string"},
    "rayCluster.rayVersion": {
        "type": "string",
        "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$",
    },
    "rayCluster.upgradeStrategy.type": {"enum": ["Recreate", "None"]},
    "rayCluster.operatorVersion": {"type": "string", "pattern": "^v?[0-9]+\\.[0-9]+(\\.[0-9]+)?$"},
    "rayCluster.upgradeStrategy.method": {"enum": ["", "nameHash", "crd"]},
    "rayCluster.annotations": {"$ref": "#/definitions/annotations"},
    "rayCluster.gcsFaultTolerance.redisPasswordSecret": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "rayCluster.gcsFaultTolerance.redisPasswordKey": {"$ref": "#/definitions/secretKey"},
    "rayCluster.head.gpus": {"type": "integer", "minimum": 0},
    "rayCluster.workers.groupName": {
        "type": "string",
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        "maxLength": 40,
    },
    "rayCluster.workers.openFilesLimit": {"type": "integer", "minimum": 1024},
    "rayJob.backoffLimit": {"type": "integer", "minimum": 0},
    "rayJob.ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
    "rayJob.activeDeadlineSeconds": {"type": "integer", "minimum": 0},
    "rayJob.submitter.backoffLimit": {"type": "integer", "minimum": 0},
    "rayJob.submitter.verifyTimeoutSeconds": {"type": "integer", "minimum": 60},
    "singleNode.launcher": {"type": "string", "pattern": "^[^\\s]+\\.py$"},
    "singleNode.backoffLimit": {"type": "integer", "minimum": 0},
    "singleNode.openFilesLimit": {"type": "integer", "minimum": 1024},
    "gpuPods.efa.count": {"type": "integer", "minimum": 0},
    "gpuPods.nccl.nvlsEnable": {"enum": ["0", "1"]},
    "gpuPods.nccl.debug": {"enum": ["VERSION", "WARN", "INFO", "TRACE"]},
    "gpuPods.nccl.proto": {"type": "string", "pattern": "^[A-Za-z0-9,^]+$"},
    "gpuPods.securityContext": {"$ref": "#/definitions/securityContext"},
    "gpuPods.podSecurityContext": {"$ref": "#/definitions/podSecurityContext"},
    "gpuPods.gpuResource": {"$ref": "#/definitions/extendedResource"},
    "gpuPods.efa.resourceName": {"$ref": "#/definitions/extendedResource"},
    "scheduling.priorityClassName": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "scheduling.schedulerName": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    # the chart also writes it as the kueue.x-k8s.io/queue-name label: a LocalQueue name that is a label value
    "scheduling.kueueQueue": {
        "allOf": [{"$ref": "#/definitions/dnsSubdomainOrEmpty"}, k8s_shapes.label_value_schema()]
    },
    # and kueue.x-k8s.io/priority-class: a WorkloadPriorityClass name that is a label value
    "scheduling.kueuePriorityClass": {
        "allOf": [{"$ref": "#/definitions/dnsSubdomainOrEmpty"}, k8s_shapes.label_value_schema()]
    },
    "networkPolicy.extraFrom": {"$ref": "#/definitions/networkPolicyPeers"},
    "networkPolicy.metricsFrom": {"$ref": "#/definitions/networkPolicyPeers"},
    "networkPolicy.operatorFrom": {"$ref": "#/definitions/networkPolicyPeers"},
    "serviceAccount.name": {"$ref": "#/definitions/dnsSubdomainOrEmpty"},
    "podSecurityContext": {"$ref": "#/definitions/podSecurityContext"},
    "securityContext": {"$ref": "#/definitions/securityContext"},
    "hooks.podSecurityContext": {"$ref": "#/definitions/podSecurityContext"},
    "hooks.securityContext": {"$ref": "#/definitions/securityContext"},
    "submit.onChange": {"enum": ["restart", "fail"]},
    "hooks.preflight.whenFull": {"enum": ["fail", "wait"]},
    "hooks.preflight.imageCheckTimeoutSeconds": {"type": "integer", "minimum": 1},
    "hooks.preflight.capacityCheckTimeoutSeconds": {"type": "integer", "minimum": 1},
    "submit.entrypointResources": {
        "type": "object",
        "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
    },
    "checks.gpu.tolerance": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "checks.health.maxRepetitionFrac": {"type": "number", "minimum": 0, "maximum": 1},
    "hooks.logFormat": {"enum": ["text", "json"]},
    "hooks.backoffLimit": {"type": "integer", "minimum": 0},
    "hooks.convert.command": ARGV,
    "hooks.convert.shmSize": {"$ref": "#/definitions/quantity"},
    "hooks.convert.activeDeadlineSeconds": {"type": "integer", "minimum": 300},
    "hooks.convertCheck.activeDeadlineSeconds": {"type": "integer", "minimum": 60},
    "hooks.export.command": ARGV,
    "hooks.export.activeDeadlineSeconds": {"type": "integer", "minimum": 300},
    "hooks.export.backoffLimit": {"type": "integer", "minimum": 0},
    "hooks.export.ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
    "hooks.export.chunkBytes": {"type": "integer", "minimum": 1048576},
    "hooks.prepareData.hfEndpointEnv": {
        "type": "string",
        "pattern": "^([A-Z_][A-Z0-9_]*)?$",
    },
    "hooks.test.annotations": {"$ref": "#/definitions/hookAnnotations"},
    "hooks.test.reportFailOn": {
        "type": "string",
        "pattern": "^(none|(degenerate|stalled|not-started|unknown|space)"
        "(,(degenerate|stalled|not-started|unknown|space))*)$",
    },
    "hooks.test.reportTimeoutSeconds": {"type": "integer", "minimum": 10, "maximum": 3600},
    "reward.backend": {"enum": ["math_verify", "reward_model"]},
    "reward.mathAnswer": {"enum": ["anchored", "last_expression"]},
    "reward.workers": {"type": "integer", "minimum": 0, "maximum": 256},
    "reward.maxInflight": {"type": "integer", "minimum": 0},
    "reward.replicas": {"type": "integer", "minimum": 0},
    "reward.timeoutSeconds": {"type": "number", "exclusiveMinimum": 0},
    "reward.modelPath": {"type": "string", "pattern": "^[^\\s]*$"},
    "reward.logLevel": {"enum": ["debug", "info", "warning", "error"]},
    "reward.pdb.minAvailable": {
        "type": ["integer", "string"],
        "minimum": 0,
        "pattern": "^[0-9]+%?$",
    },
    "reward.podMonitor.interval": {"$ref": "#/definitions/prometheusDuration"},
    "rayCluster.podMonitor.interval": {"$ref": "#/definitions/prometheusDuration"},
    "dashboards.annotations": {"$ref": "#/definitions/annotations"},
    "reward.terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
    "cluster.hyperpod.healthTaintTolerationSeconds": {"type": "integer", "minimum": 0},
    "checks.waitReadyTimeoutSeconds": {"type": "integer", "minimum": 1},
}
pos_ints = {
    "topology.",
    "recipe.numRollout",
    "recipe.rolloutBatchSize",
    "recipe.nSamplesPerPrompt",
    "recipe.globalBatchSize",
    "recipe.numStepsPerRollout",
    "recipe.rolloutMaxResponseLen",
    "recipe.saveInterval",
    "recipe.reward.retry.seconds",
    "hooks.convert.nprocPerNode",
    "hooks.convert.lockStaleSeconds",
    "hooks.export.lockStaleSeconds",
    "reward.workers",
    "reward.maxInflight",
    "checks.health.",
    "activeDeadlineSeconds",
}


def node(path, v):
    if path in OVERRIDES:
        return OVERRIDES[path]
    last = path.split(".")[-1]
    if last in ("resources",):
        return {"$ref": "#/definitions/resources"}
    if last in ("tolerations",):
        return {"$ref": "#/definitions/tolerations"}
    if last in ("nodeSelector", "labels", "podLabels"):
        return {"$ref": "#/definitions/labels"}
    if last == "hookAnnotations" or (
        last in ("annotations", "preflightAnnotations", "readerAnnotations") and path.startswith("hooks.")
    ):
        return {"$ref": "#/definitions/hookAnnotations"}
    if last in ("annotations", "podAnnotations", "runSpecAnnotations"):
        return {
            "$ref": "#/definitions/hookAnnotations"
            if last == "runSpecAnnotations"
            else "#/definitions/annotations"
        }
    if last in ("affinity",):
        return {"$ref": "#/definitions/affinity"}
    if last in ("extraEnv",):
        return {"$ref": "#/definitions/env"}
    if last == "extraVolumes":
        return {"$ref": "#/definitions/volumes"}
    if last == "extraVolumeMounts":
        return {"$ref": "#/definitions/volumeMounts"}
    if last in ("rayStartParams",):
        return {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "values must be strings (quoted)",
        }
    if last in ("shmSize", "capacity"):
        return {"$ref": "#/definitions/quantity"}
    if isinstance(v, dict):
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: node(f"{path}.{k}" if path else k, vv) for k, vv in v.items()},
        }
    if isinstance(v, bool):
        return {"type": "boolean"}
    if isinstance(v, int):
        if any(path.startswith(p) or path.endswith(p) for p in pos_ints):
            return {"type": "integer", "minimum": 1}
        return {"type": "integer", "minimum": 0}
    if isinstance(v, float):
        return {"type": "number", "minimum": 0}
    if isinstance(v, str):
        return {"type": "string"}
    if isinstance(v, list):
        return {"type": "array"}
    raise SystemExit(f"no type for {path}")


root = node("", vals)

# Keys that moved to another place. The schema lets them through (any value) so that the chart's one
# collected validation (templates/_validate.tpl) can refuse them with the key to use instead, which
# additionalProperties: false could not say.
MOVED = {
    "rayCluster.workers.gpuResource": "gpuPods.gpuResource",
    "rayCluster.workers.efa": "gpuPods.efa",
    "rayCluster.workers.nccl": "gpuPods.nccl",
    "rayCluster.workers.shmSize": "gpuPods.shmSize",
    "rayCluster.workers.nodeSelector": "gpuPods.nodeSelector",
    "rayCluster.workers.tolerations": "gpuPods.tolerations",
    "rayCluster.workers.affinity": "gpuPods.affinity",
    "rayCluster.workers.annotations": "gpuPods.annotations",
    "gpuSecurityContext": "gpuPods.securityContext",
    "gpuPodSecurityContext": "gpuPods.podSecurityContext",
    "hooks.rbac.apiDryRunAnnotations": "hooks.rbac.preflightAnnotations",
}
for old, new in MOVED.items():
    *parents, leaf = old.split(".")
    obj = root
    for part in parents:
        obj = obj["properties"][part]
    assert leaf not in obj["properties"], f"{old} is still in values.yaml"
    obj["properties"][leaf] = {
        "description": f"moved to {new}; refused by the chart with a message naming {new}"
    }
schema = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "charts/miles values",
    "definitions": defs,
    **root,
}
# numbers that may legitimately be floats
for p in [
    "checks.gpu.matmulTflops",
    "checks.gpu.copyGBps",
    "checks.gpu.allReduceBusbwGBps",
    "checks.gpu.sendRecvBusbwGBps",
]:
    a, b, c = p.split(".")
    schema["properties"][a]["properties"][b]["properties"][c] = {
        "type": "number",
        "minimum": 0,
    }
text = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
target = CHART / "values.schema.json"
if "--check" in sys.argv[1:]:
    if target.read_text() != text:
        sys.exit("charts/miles/values.schema.json is stale: run `make generate`")
else:
    target.write_text(text)
