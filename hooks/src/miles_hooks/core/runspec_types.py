"""The run spec's shape as TypedDicts (what ``schemas/run-spec.schema.json`` validates).

``RunSpec.raw`` is a :class:`RawSpec`, so a step that reads ``spec.raw["topology"]["gpusPerWorker"]``
is type-checked against the schema's field names. The schema stays the authority at run time (it is
what the chart is tested against); a change there needs the same change here (``tests`` compare
the two).
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict


class ReleaseSpec(TypedDict):
    name: str
    namespace: str
    revision: int
    fullname: str  # miles.fullname: prefix of every object the chart creates
    chartVersion: str
    appVersion: str


class ImagesSpec(TypedDict):
    miles: str  # repo@digest when a digest is set, else repo:tag
    hooks: str
    milesRollingTag: bool


class TolerationSpec(TypedDict):
    key: NotRequired[str]
    operator: NotRequired[Literal["Exists", "Equal"]]
    value: NotRequired[str]
    effect: NotRequired[Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"]]
    tolerationSeconds: NotRequired[int | None]


class NodePoolSpec(TypedDict):
    nodeSelector: dict[str, str]
    tolerations: list[TolerationSpec]


class RayClusterSpec(TypedDict):
    enabled: bool
    name: str
    rayVersion: str
    headService: str  # <cluster>-head-svc
    dashboardUrl: str
    headGpus: int  # GPUs the head advertises (0 = CPU head with num-cpus 0)
    workerGroup: str
    head: NodePoolSpec
    worker: NodePoolSpec


class TopologySpec(TypedDict):
    colocate: bool
    actorNodes: int
    actorGpusPerNode: int
    actorGpus: int
    rolloutGpus: int
    rolloutGpusPerEngine: int
    rolloutEngines: int
    gpusPerWorker: int
    enginesPerWorker: int
    rolloutWorkers: int  # 0 when colocated
    workerReplicas: int
    clusterGpus: int
    tensorParallel: int
    pipelineParallel: int
    contextParallel: int
    expertParallel: int
    expertTensorParallel: int
    sequenceParallel: bool  # --sequence-parallel (only with tensorParallel > 1)
    dataParallel: int  # actorGpus / (TP x PP x CP)


class ArchitectureSpec(TypedDict):
    known: bool
    numLayers: int
    numAttentionHeads: int
    numQueryGroups: int
    numExperts: int


class ModelSpec(TypedDict):
    repoId: str
    revision: str
    profile: str  # miles model profile, e.g. qwen3-4B
    hfPath: str
    torchDistPath: str
    trainBackend: Literal["megatron"]
    parameterCount: int
    architecture: ArchitectureSpec


class EvalDataSpec(TypedDict):
    name: str
    path: str


class DatasetSpec(TypedDict):
    repoId: str
    revision: str
    files: list[str]
    path: str


class DataSpec(TypedDict):
    promptData: str
    evalData: list[EvalDataSpec]
    inputKey: str
    labelKey: str
    datasets: list[DatasetSpec]


class CheckpointBudgetSpec(TypedDict):
    savedCheckpoints: int  # most checkpoints on disk at once
    checkpointBytes: int
    hfBytes: int
    torchDistBytes: int
    totalBytes: int


class OutputSpec(TypedDict):
    dir: str  # per-release run directory; reusing it resumes
    checkpointDir: str  # --load/--save (parent of iter_*)
    tensorboardDir: str
    provenanceFile: str
    checkpointBudget: CheckpointBudgetSpec


class ResumeSpec(TypedDict):
    numRollout: int  # recipe.numRollout: a checkpoint at iteration numRollout - 1 or later is a finished run
    adoptCheckpoints: bool  # output.adoptCheckpoints


class TrainSpec(TypedDict):
    entrypoint: Literal["train.py", "train_async.py"]
    workdir: str  # /root/miles
    modelArgsCommand: str
    args: list[str]  # full train argument list (excluding model args)


class RuntimeEnvSpec(TypedDict):
    envVars: dict[str, str]


class RewardSpec(TypedDict):
    type: str
    url: str | None
    serviceEnabled: bool


class RunIdentitySpec(TypedDict):
    id: str  # SHA-256 of the job-defining sections (the chart's miles.runDefinition)
    definedBy: list[str]


class SubmitSpec(TypedDict):
    onChange: Literal["restart", "fail"]
    entrypointResources: dict[str, float]
    submissionId: str  # the Ray job's id in every mode (the chart's miles.submissionId)
    logDir: str  # <output.dir>/logs: each start's driver log, <submissionId>-<UTC time>.log


class StorageSpec(TypedDict):
    mountPath: str
    claimName: str
    createdByChart: bool
    kind: Literal["existingClaim", "fsxStatic", "fsxDynamic"]


class SecretSpec(TypedDict):
    purpose: Literal["huggingface", "wandb", "rayAuth", "other"]
    name: str
    key: str
    env: str
    required: bool
    generate: NotRequired[bool]  # preflight creates it with a random token when absent (Ray token)


class NodesSpec(TypedDict):
    enabled: bool  # node checks need the optional ClusterRole
    gpuResource: str
    gpusPerNode: int
    efaResource: str
    efaPerNode: int  # EFA devices each worker requests; 0 = EFA off
    cluster: Literal["eks", "hyperpod", "generic"]


class GpuSpec(TypedDict):
    enabled: bool
    tolerance: float  # fraction of a reference figure a GPU must reach
    matmulTflops: float
    copyGBps: float
    allReduceBusbwGBps: float
    sendRecvBusbwGBps: float


class HealthSpec(TypedDict):
    flatRewardRollouts: int
    maxRepetitionFrac: float
    stallMinutes: int


class ImageCheckSpec(TypedDict):
    enabled: bool  # hooks.preflight.imageCheck: preflight runs the miles image on each pool first
    timeoutSeconds: int
    pullPolicy: str  # image.pullPolicy
    pullSecrets: list[str]  # imagePullSecrets names


class CapacityCheckSpec(TypedDict):
    enabled: bool  # hooks.preflight.capacityCheck: the scheduler places a stand-in of each GPU worker first
    whenFull: Literal["fail", "wait"]  # hooks.preflight.whenFull
    timeoutSeconds: int  # hooks.preflight.capacityCheckTimeoutSeconds
    queued: bool  # scheduling.kueueQueue is set: Kueue's admission decides, nothing is placed


class ChecksSpec(TypedDict):
    nodes: NodesSpec
    image: ImageCheckSpec
    capacity: CapacityCheckSpec
    apiDryRun: bool  # preflight dry-runs manifests.yaml, beside the run spec
    waitReadyTimeoutSeconds: int
    gpu: GpuSpec
    health: HealthSpec  # run-health thresholds used by report/helm test


class ImageFactsSpec(TypedDict):
    enabled: bool  # hooks.prepareData.imageFacts
    timeoutSeconds: int  # hooks.prepareData.imageFactsTimeoutSeconds
    file: str  # <output.dir>/image-facts.json


class PrepareSpec(TypedDict):
    download: bool  # false: only check presence, fail if missing
    hfEndpointEnv: str
    imageFacts: ImageFactsSpec
    sourceDir: NotRequired[str]


class ConvertSpec(TypedDict):
    enabled: bool
    command: list[str]
    nprocPerNode: int
    lockStaleSeconds: int
    pool: NodePoolSpec
    requests: dict[str, str]
    runsThisPhase: bool


class ExportSpec(TypedDict):
    enabled: bool
    onRunEnd: bool
    command: list[str]
    dir: str
    chunkBytes: int
    lockStaleSeconds: int
    jobTemplate: str
    pool: NodePoolSpec
    requests: dict[str, str]


class RawSpec(TypedDict):
    """The whole run spec: the ConfigMap `<fullname>-run`, key `run.json`."""

    schemaVersion: Literal[3]
    release: ReleaseSpec
    mode: Literal["rayCluster", "rayJob", "singleNode"]
    images: ImagesSpec
    rayCluster: RayClusterSpec
    topology: TopologySpec
    model: ModelSpec
    data: DataSpec
    output: OutputSpec
    train: TrainSpec
    runtimeEnv: RuntimeEnvSpec
    reward: RewardSpec
    run: RunIdentitySpec
    resume: ResumeSpec
    submit: SubmitSpec
    storage: StorageSpec
    secrets: list[SecretSpec]
    checks: ChecksSpec
    prepare: PrepareSpec
    convert: ConvertSpec
    export: ExportSpec
