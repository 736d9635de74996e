{{/*
miles.trainArgs: the full train argument list (JSON array of strings), excluding the profile's model
args, which the submitted entrypoint expands at run time in the same shell.
*/}}
{{- define "miles.trainArgs" -}}
{{- $v := .Values -}}
{{- $t := include "miles.topology" . | fromJson -}}
{{- $r := $v.recipe -}}
{{- $out := include "miles.outputDir" . -}}
{{- $a := list
  "--train-backend" $v.model.trainBackend
  "--actor-num-nodes" (toString $t.actorNodes)
  "--actor-num-gpus-per-node" (toString $t.actorGpusPerNode)
  "--num-gpus-per-node" (toString $t.gpusPerWorker)
  "--rollout-num-gpus" (toString $t.rolloutGpus)
  "--rollout-num-gpus-per-engine" (toString $t.rolloutGpusPerEngine)
-}}
{{- if $t.colocate -}}{{- $a = append $a "--colocate" -}}{{- end -}}
{{- $a = concat $a (list
  "--tensor-model-parallel-size" (toString $t.tensorParallel)
  "--pipeline-model-parallel-size" (toString $t.pipelineParallel)
  "--context-parallel-size" (toString $t.contextParallel)
  "--expert-model-parallel-size" (toString $t.expertParallel)
  "--expert-tensor-parallel-size" (toString $t.expertTensorParallel)) -}}
{{- if $t.sequenceParallel -}}{{- $a = append $a "--sequence-parallel" -}}{{- end -}}
{{- $mem := $r.memory -}}
{{- if eq $mem.recompute "full" -}}
{{- $a = concat $a (list "--recompute-granularity" "full" "--recompute-method" "uniform" "--recompute-num-layers" "1") -}}
{{- else if eq $mem.recompute "selective" -}}
{{- $a = concat $a (list "--recompute-granularity" "selective") -}}
{{- end -}}
{{- if $mem.optimizerCpuOffload -}}
{{- $a = concat $a (list "--optimizer-cpu-offload" "--overlap-cpu-optimizer-d2h-h2d" "--use-precision-aware-optimizer") -}}
{{- end -}}
{{- $a = concat $a (list "--hf-checkpoint" (include "miles.hfPath" .)) -}}
{{- $a = concat $a (list "--ref-load" (include "miles.torchDistPath" .)) -}}
{{- $a = concat $a (list
  "--load" (printf "%s/checkpoints" $out)
  "--save" (printf "%s/checkpoints" $out)
  "--save-interval" (toString (int $r.saveInterval))
  "--prompt-data" (include "miles.promptData" .)
  "--input-key" $v.data.inputKey
  "--label-key" $v.data.labelKey) -}}
{{- /* a resume checks the checkpoint's optimiser schedule against these values and asserts on any difference
  unless told whose to follow (Megatron's OptimizerParamScheduler._check_and_set) */ -}}
{{- $a = append $a (ternary "--use-checkpoint-opt_param-scheduler" "--override-opt_param-scheduler" (eq $r.checkpoint.resumeSchedule "checkpoint")) -}}
{{- if gt (int $r.checkpoint.retainInterval) 0 -}}
{{- $a = concat $a (list "--save-retain-interval" (toString (int $r.checkpoint.retainInterval))) -}}
{{- end -}}
{{- if $v.data.applyChatTemplate -}}{{- $a = append $a "--apply-chat-template" -}}{{- end -}}
{{- if $r.rolloutShuffle -}}{{- $a = append $a "--rollout-shuffle" -}}{{- end -}}
{{- if $r.balanceData -}}{{- $a = append $a "--balance-data" -}}{{- end -}}
{{- if and $v.data.evalData (gt (int $r.evalInterval) 0) -}}
{{- $a = append $a "--eval-prompt-data" -}}
{{- range $v.data.evalData -}}
{{- $a = concat $a (list .name (include "miles.path" (dict "context" $ "path" .path))) -}}
{{- end -}}
{{- $a = concat $a (list "--eval-interval" (toString (int $r.evalInterval))) -}}
{{- end -}}
{{- $a = concat $a (list "--rm-type" (include "miles.rewardType" .)) -}}
{{- with include "miles.rewardUrl" . -}}
{{- if eq (include "miles.rewardType" $) "remote_rm" -}}{{- $a = concat $a (list "--rm-url" .) -}}{{- end -}}
{{- end -}}
{{- if include "miles.rewardClient" . -}}
{{- $a = concat $a (list "--custom-rm-path" "miles_plugins.k8s_remote_rm.remote_rm") -}}
{{- end -}}
{{- $a = concat $a (list
  "--num-rollout" (toString (int $r.numRollout))
  "--rollout-batch-size" (toString (int $r.rolloutBatchSize))
  "--n-samples-per-prompt" (toString (int $r.nSamplesPerPrompt))
  "--global-batch-size" (toString (int $r.globalBatchSize))
  "--num-steps-per-rollout" (toString (int $r.numStepsPerRollout))
  "--rollout-max-response-len" (toString (int $r.rolloutMaxResponseLen))
  "--rollout-temperature" (toString $r.rolloutTemperature)
  "--lr" (toString $r.lr)
  "--lr-decay-style" $r.lrDecayStyle
  "--weight-decay" (toString $r.weightDecay)
  "--adam-beta2" (toString $r.adamBeta2)
  "--attention-dropout" (toString $r.dropout)
  "--hidden-dropout" (toString $r.dropout)
  "--advantage-estimator" $r.advantageEstimator
  "--eps-clip-high" (toString $r.epsClipHigh)) -}}
{{- /* miles_validate_args: the reinforce_plus_plus estimators require advantage normalization */ -}}
{{- if hasPrefix "reinforce_plus_plus" $r.advantageEstimator -}}{{- $a = append $a "--normalize-advantages" -}}{{- end -}}
{{- if gt (int $r.maxTokensPerGpu) 0 -}}
{{- $a = concat $a (list "--use-dynamic-batch-size" "--max-tokens-per-gpu" (toString (int $r.maxTokensPerGpu))) -}}
{{- end -}}
{{- $a = concat $a (list
  "--sglang-mem-fraction-static" (toString $r.sglangMemFractionStatic)
  "--sglang-log-level" $r.sglangLogLevel) -}}
{{- with $r.sglangMoeRunnerBackend -}}{{- $a = concat $a (list "--sglang-moe-runner-backend" .) -}}{{- end -}}
{{- if gt (int $r.sglangExpertParallel) 0 -}}
{{- $a = concat $a (list "--sglang-expert-parallel-size" (toString (int $r.sglangExpertParallel))) -}}
{{- end -}}
{{- /* miles' TensorBoard writer takes its directory from TENSORBOARD_DIR (miles.runtimeEnv) */ -}}
{{- if $r.tracking.tensorboard -}}{{- $a = append $a "--use-tensorboard" -}}{{- end -}}
{{- if $r.tracking.wandb.enabled -}}
{{- $a = concat $a (list "--use-wandb" "--wandb-project" $r.tracking.wandb.project "--wandb-group" (default .Release.Name $r.tracking.wandb.group)) -}}
{{- end -}}
{{- if $r.useFaultTolerance -}}{{- $a = append $a "--use-fault-tolerance" -}}{{- end -}}
{{- range $r.extraArgs -}}{{- $a = append $a (toString .) -}}{{- end -}}
{{- toJson $a -}}
{{- end -}}

{{/*
miles.runDefinition: what defines the run (the job-defining sections of the run spec), as compact JSON with sorted
keys. Its SHA-256 is the run's identity (miles.runId): the same definition is the same run in every mode (one
submission id, one RayJob per cluster shape), a changed one is a new run. Everything else in the spec (release
revision, chart version, hooks image, checks, prepare and convert settings, the Ray pods' shape) can change
without restarting training. docs/day2.md says which values are in it.
*/}}
{{- define "miles.runDefinition" -}}
{{- $v := .Values -}}
{{- $out := include "miles.outputDir" . -}}
{{- $evalData := list -}}
{{- range $v.data.evalData -}}
{{- $evalData = append $evalData (dict "name" .name "path" (include "miles.path" (dict "context" $ "path" .path))) -}}
{{- end -}}
{{- $datasets := list -}}
{{- range $v.data.datasets -}}
{{- $datasets = append $datasets (dict "repoId" .repoId "revision" .revision "files" .files "path" (include "miles.path" (dict "context" $ "path" .path))) -}}
{{- end -}}
{{- $rewardUrl := include "miles.rewardUrl" . -}}
{{- $def := dict
  "release" (dict "name" .Release.Name "namespace" .Release.Namespace)
  "mode" $v.mode
  "milesImage" (include "miles.image" .)
  "rayVersion" $v.rayCluster.rayVersion
  "entrypointResources" $v.submit.entrypointResources
  "topology" (include "miles.topology" . | fromJson)
  "model" (dict
    "repoId" $v.model.repoId
    "revision" $v.model.revision
    "profile" $v.model.profile
    "hfPath" (include "miles.hfPath" .)
    "torchDistPath" (include "miles.torchDistPath" .)
    "trainBackend" $v.model.trainBackend
    "parameterCount" (int64 $v.model.parameterCount)
    "architecture" (include "miles.architecture" . | fromJson))
  "data" (dict
    "promptData" (include "miles.promptData" .)
    "evalData" $evalData
    "inputKey" $v.data.inputKey
    "labelKey" $v.data.labelKey
    "datasets" $datasets)
  "output" (dict
    "dir" $out
    "checkpointDir" (printf "%s/checkpoints" $out)
    "tensorboardDir" (printf "%s/tensorboard" $out)
    "provenanceFile" (printf "%s/provenance.json" $out)
    "checkpointBudget" (include "miles.checkpointBudget" . | fromJson))
  "train" (dict
    "entrypoint" $v.recipe.entrypoint
    "workdir" "/root/miles"
    "modelArgsCommand" (printf "python3 /root/miles/miles/utils/external_utils/model_args_utils.py %s" $v.model.profile)
    "args" (include "miles.trainArgs" . | fromJsonArray))
  "runtimeEnv" (dict "envVars" (include "miles.runtimeEnv" . | fromJson))
  "reward" (dict "type" (include "miles.rewardType" .) "url" (ternary $rewardUrl nil (ne $rewardUrl "")) "serviceEnabled" $v.reward.enabled)
-}}
{{- toJson $def -}}
{{- end -}}

{{/* miles.runId: the run's identity, the SHA-256 of miles.runDefinition (64 hex). */}}
{{- define "miles.runId" -}}
{{- include "miles.runDefinition" . | sha256sum -}}
{{- end -}}

{{/*
miles.submissionId: the Ray job's submission id in every mode: the release's full name (at most 40 characters),
then the first 12 hex of the run's identity. The same run is never submitted twice under another id.
*/}}
{{- define "miles.submissionId" -}}
{{- printf "%s-%s" (include "miles.fullname" . | trunc 40 | trimSuffix "-") (include "miles.runId" . | trunc 12) -}}
{{- end -}}

{{/*
miles.runSpec: the run spec dict (docs/chart.md "The run spec"), as pretty JSON.
Validated against hooks/src/miles_hooks/schemas/run-spec.schema.json by tests/chart.
*/}}
{{- define "miles.runSpec" -}}
{{- $v := .Values -}}
{{- $full := include "miles.fullname" . -}}
{{- $t := include "miles.topology" . | fromJson -}}
{{- $pools := include "miles.pools" . | fromJson -}}
{{- $exportRequests := dict -}}
{{- range $name, $quantity := ((include "miles.exportResources" . | fromYaml).requests | default dict) -}}
{{- $_ := set $exportRequests $name (include "miles.quantityText" $quantity) -}}
{{- end -}}
{{- $convertRequests := dict -}}
{{- range $name, $quantity := (($v.hooks.convert.resources | default dict).requests | default dict) -}}
{{- $_ := set $convertRequests $name (include "miles.quantityText" $quantity) -}}
{{- end -}}
{{- /* whether the GPU convert pod runs in this phase (preflight checks its pool then): on install or its retry (miles.installPending), and on another upgrade only when its hook annotation names pre-upgrade */ -}}
{{- $convertRuns := and $v.hooks.convert.enabled (or .Release.IsInstall (eq (include "miles.installPending" .) "true") (contains "pre-upgrade" (toString (index $v.hooks.convert.annotations "helm.sh/hook")))) -}}
{{- $rayJob := eq $v.mode "rayJob" -}}
{{- /* in mode rayJob the hooks reach the cluster through the RayJob's own head Service, which follows each attempt's cluster */ -}}
{{- $rc := ternary (include "miles.rayJobName" .) (include "miles.rayClusterName" .) $rayJob -}}
{{- $rayEnabled := ne $v.mode "singleNode" -}}
{{- $headSvc := printf "%s-head-svc" $rc -}}
{{- $dashboard := printf "http://%s.%s.svc:8265" $headSvc .Release.Namespace -}}
{{- if not $rayEnabled -}}
{{- $headSvc = "127.0.0.1" -}}
{{- $dashboard = "http://127.0.0.1:8265" -}}
{{- end -}}
{{- $definition := include "miles.runDefinition" . -}}
{{- $def := $definition | fromJson -}}
{{- $runId := $definition | sha256sum -}}
{{- $gpuChecks := $v.checks.gpu -}}
{{- $spec := dict
  "schemaVersion" 3
  "release" (dict "name" .Release.Name "namespace" .Release.Namespace "revision" (int .Release.Revision) "fullname" $full "chartVersion" .Chart.Version "appVersion" .Chart.AppVersion)
  "mode" $v.mode
  "images" (dict "miles" (include "miles.image" .) "hooks" (include "miles.hooksImage" .) "milesRollingTag" (eq (include "miles.rollingTag" .) "true"))
  "rayCluster" (dict
    "enabled" $rayEnabled
    "name" $rc
    "rayVersion" $v.rayCluster.rayVersion
    "headService" $headSvc
    "dashboardUrl" $dashboard
    "headGpus" (ternary (int $v.rayCluster.head.gpus) 0 $rayEnabled)
    "workerGroup" $v.rayCluster.workers.groupName
    "head" $pools.head
    "worker" $pools.worker)
  "topology" $def.topology
  "model" $def.model
  "data" $def.data
  "output" $def.output
  "train" $def.train
  "runtimeEnv" $def.runtimeEnv
  "reward" $def.reward
  "run" (dict "id" $runId "definedBy" (keys $def | sortAlpha))
  "resume" (dict "numRollout" (int $v.recipe.numRollout) "adoptCheckpoints" $v.output.adoptCheckpoints)
  "submit" (dict "onChange" $v.submit.onChange "entrypointResources" $v.submit.entrypointResources "submissionId" (include "miles.submissionId" .) "logDir" (printf "%s/logs" $def.output.dir))
  "storage" (dict "mountPath" $v.storage.mountPath "claimName" (include "miles.claimName" .) "createdByChart" (ne $v.storage.type "existingClaim") "kind" $v.storage.type)
  "secrets" (include "miles.secretRefs" . | fromJsonArray)
  "checks" (dict
    "image" (dict
      "enabled" (and $v.hooks.enabled $v.hooks.preflight.enabled $v.hooks.preflight.imageCheck)
      "timeoutSeconds" (int $v.hooks.preflight.imageCheckTimeoutSeconds)
      "pullPolicy" $v.image.pullPolicy
      "pullSecrets" $v.imagePullSecrets)
    "capacity" (dict
      "enabled" (and $v.hooks.enabled $v.hooks.preflight.enabled $v.hooks.preflight.capacityCheck)
      "whenFull" $v.hooks.preflight.whenFull
      "timeoutSeconds" (int $v.hooks.preflight.capacityCheckTimeoutSeconds)
      "queued" (ne $v.scheduling.kueueQueue ""))
    "nodes" (dict
      "enabled" (and $v.hooks.preflight.enabled $v.hooks.preflight.nodeChecks)
      "gpuResource" $v.gpuPods.gpuResource
      "gpusPerNode" (int $t.gpusPerWorker)
      "efaResource" $v.gpuPods.efa.resourceName
      "efaPerNode" (int $v.gpuPods.efa.count)
      "cluster" $v.cluster.preset)
    "apiDryRun" (eq (include "miles.apiDryRun" .) "true")
    "waitReadyTimeoutSeconds" (int $v.checks.waitReadyTimeoutSeconds)
    "gpu" (dict
      "enabled" $gpuChecks.enabled
      "tolerance" $gpuChecks.tolerance
      "matmulTflops" $gpuChecks.matmulTflops
      "copyGBps" $gpuChecks.copyGBps
      "allReduceBusbwGBps" $gpuChecks.allReduceBusbwGBps
      "sendRecvBusbwGBps" $gpuChecks.sendRecvBusbwGBps)
    "health" (dict
      "flatRewardRollouts" (int $v.checks.health.flatRewardRollouts)
      "maxRepetitionFrac" $v.checks.health.maxRepetitionFrac
      "stallMinutes" (int $v.checks.health.stallMinutes)))
  "prepare" (dict
    "download" $v.hooks.prepareData.download
    "hfEndpointEnv" $v.hooks.prepareData.hfEndpointEnv
    "imageFacts" (dict
      "enabled" (eq (include "miles.imageFacts" .) "true")
      "timeoutSeconds" (int $v.hooks.prepareData.imageFactsTimeoutSeconds)
      "file" (printf "%s/image-facts.json" $def.output.dir)))
  "convert" (dict
    "enabled" $v.hooks.convert.enabled
    "command" $v.hooks.convert.command
    "nprocPerNode" (int $v.hooks.convert.nprocPerNode)
    "lockStaleSeconds" (int $v.hooks.convert.lockStaleSeconds)
    "pool" $pools.convert
    "requests" $convertRequests
    "runsThisPhase" $convertRuns)
  "export" (dict
    "enabled" (eq (include "miles.exportEnabled" .) "true")
    "onRunEnd" (eq (include "miles.exportOnRunEnd" .) "true")
    "command" $v.hooks.export.command
    "dir" (printf "%s/hf" $def.output.dir)
    "chunkBytes" (int64 $v.hooks.export.chunkBytes)
    "lockStaleSeconds" (int $v.hooks.export.lockStaleSeconds)
    "jobTemplate" (include "miles.componentName" (dict "context" . "component" "export"))
    "pool" $pools.export
    "requests" $exportRequests)
-}}
{{- toPrettyJson $spec -}}
{{- end -}}

{{/* miles.secretRefs: JSON list of {purpose,name,key,env,required[,generate]} for every Secret the release references. */}}
{{- define "miles.secretRefs" -}}
{{- $v := .Values -}}
{{- $refs := list -}}
{{- with $v.secrets.huggingface.existingSecret -}}
{{- $refs = append $refs (dict "purpose" "huggingface" "name" . "key" $v.secrets.huggingface.key "env" "HF_TOKEN" "required" true) -}}
{{- end -}}
{{- with $v.secrets.wandb.existingSecret -}}
{{- $refs = append $refs (dict "purpose" "wandb" "name" . "key" $v.secrets.wandb.key "env" "WANDB_API_KEY" "required" $v.recipe.tracking.wandb.enabled) -}}
{{- end -}}
{{- range $v.secrets.extra -}}
{{- $refs = append $refs (dict "purpose" "other" "name" .name "key" .key "env" .env "required" (ne .required false)) -}}
{{- end -}}
{{- if $v.secrets.rayAuth.enabled -}}
{{- /* generate: preflight creates the Secret with a random token when absent (the value never enters a manifest) */ -}}
{{- $name := default (include "miles.componentName" (dict "context" . "component" "ray-auth")) $v.secrets.rayAuth.existingSecret -}}
{{- $refs = append $refs (dict "purpose" "rayAuth" "name" $name "key" (include "miles.rayAuthKey" .) "env" "RAY_AUTH_TOKEN" "required" true "generate" (empty $v.secrets.rayAuth.existingSecret)) -}}
{{- end -}}
{{- toJson $refs -}}
{{- end -}}

{{/*
miles.kuberayReadsRayAuth: "true" where KubeRay can be told the Ray token (spec.authOptions with
secretName, KubeRay 1.6 or newer): Ray auth on and Ray run by KubeRay (not mode singleNode).
*/}}
{{- define "miles.kuberayReadsRayAuth" -}}
{{- $v := .Values -}}
{{- if and $v.secrets.rayAuth.enabled (ne $v.mode "singleNode") (include "miles.kuberayHas16" .) -}}true{{- end -}}
{{- end -}}

{{/* miles.rayAuthKey: the Ray token's key in its Secret: secrets.rayAuth.key, or auth_token (the key KubeRay reads) where KubeRay can read it, else token. */}}
{{- define "miles.rayAuthKey" -}}
{{- default (ternary "auth_token" "token" (eq (include "miles.kuberayReadsRayAuth" .) "true")) .Values.secrets.rayAuth.key -}}
{{- end -}}

{{/*
miles.rayAuthOptions: "true" when the RayCluster declares its token to KubeRay (spec.authOptions): where
KubeRay can read it and the token sits under its key. The pods' env names the token either way, so
KubeRay adds none; without authOptions KubeRay just does not know the cluster asks for a token (mode
rayJob requires it: miles.validate).
*/}}
{{- define "miles.rayAuthOptions" -}}
{{- if and (include "miles.kuberayReadsRayAuth" .) (eq (include "miles.rayAuthKey" .) "auth_token") }}true{{ end -}}
{{- end -}}

{{/*
miles.runtimeEnv: non-secret env shared by Ray pods, the single-node pod and the Ray job runtime env
(name -> value). Names that look like credentials (…TOKEN…) are refused in the runtime env by
miles-hooks, so TOKENIZERS_PARALLELISM lives in miles.podEnv only (job processes inherit it from the raylet).
*/}}
{{- define "miles.runtimeEnv" -}}
{{- $v := .Values -}}
{{- $env := dict
  "PYTHONPATH" "/root/miles:/root/Megatron-LM"
  "CUDA_DEVICE_MAX_CONNECTIONS" "1"
  "NCCL_NVLS_ENABLE" (toString $v.gpuPods.nccl.nvlsEnable)
  "PYTHONUNBUFFERED" "1"
  "PROMETHEUS_PORT" "9090"
  "RAY_memory_monitor_refresh_ms" "0"
-}}
{{- if $v.recipe.tracking.tensorboard -}}
{{- /* miles/utils/tracking_utils/tensorboard_utils.py: --use-tensorboard fails without it (or --tb-project-name) */ -}}
{{- $_ := set $env "TENSORBOARD_DIR" (printf "%s/tensorboard" (include "miles.outputDir" .)) -}}
{{- end -}}
{{- if include "miles.rewardClient" . -}}
{{- $_ := set $env "MILES_RM_RETRY_SECONDS" (toString (int $v.recipe.reward.retry.seconds)) -}}
{{- end -}}
{{- range $k, $val := $v.recipe.extraEnv -}}{{- $_ := set $env $k (toString $val) -}}{{- end -}}
{{- toJson $env -}}
{{- end -}}

