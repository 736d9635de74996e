{{/*
miles.topology: the single source of topology arithmetic (docs/chart.md "Scenarios and what they render"), as JSON.
Hooks never recompute it; they read it from the run spec.
  colocated:      workerReplicas = actorNodes
  disaggregated:  workerReplicas = actorNodes + ceil(rolloutEngines / enginesPerWorker)
                  rolloutEngines = rolloutGpus / rolloutGpusPerEngine
                  enginesPerWorker = gpusPerWorker / rolloutGpusPerEngine
  singleNode:     one pod with all GPUs of one node (workerReplicas = 1)
  dataParallel = actor GPUs / (TP × PP × CP)   (Megatron's data-parallel size)
Divisions by zero cannot happen: the schema requires every count ≥ 1.
*/}}
{{- define "miles.topology" -}}
{{- $t := .Values.topology -}}
{{- $actorNodes := int $t.actorNodes -}}
{{- $actorGpusPerNode := int $t.actorGpusPerNode -}}
{{- $actorGpus := mul $actorNodes $actorGpusPerNode -}}
{{- $perEngine := int $t.rolloutGpusPerEngine -}}
{{- $gpusPerWorker := int $t.gpusPerWorker -}}
{{- $rolloutGpus := int $t.rolloutGpus -}}
{{- $engines := div $rolloutGpus $perEngine -}}
{{- $enginesPerWorker := max 1 (div $gpusPerWorker $perEngine) -}}
{{- $rolloutWorkers := 0 -}}
{{- if and (not $t.colocate) (ne .Values.mode "singleNode") -}}
{{- $rolloutWorkers = div (sub (add $engines $enginesPerWorker) 1) $enginesPerWorker -}}
{{- end -}}
{{- $replicas := add $actorNodes $rolloutWorkers -}}
{{- if eq .Values.mode "singleNode" -}}{{- $replicas = 1 -}}{{- end -}}
{{- $headGpus := 0 -}}
{{- if eq .Values.mode "rayCluster" -}}{{- $headGpus = int .Values.rayCluster.head.gpus -}}{{- end -}}
{{- $tp := int $t.tensorParallel -}}
{{- $tpc := mul $tp (int $t.pipelineParallel) (int $t.contextParallel) -}}
{{- toJson (dict
  "colocate" $t.colocate
  "actorNodes" $actorNodes
  "actorGpusPerNode" $actorGpusPerNode
  "actorGpus" $actorGpus
  "rolloutGpus" $rolloutGpus
  "rolloutGpusPerEngine" $perEngine
  "rolloutEngines" (max 1 $engines)
  "gpusPerWorker" $gpusPerWorker
  "enginesPerWorker" $enginesPerWorker
  "rolloutWorkers" $rolloutWorkers
  "workerReplicas" $replicas
  "clusterGpus" (add (mul $replicas $gpusPerWorker) $headGpus)
  "tensorParallel" $tp
  "pipelineParallel" (int $t.pipelineParallel)
  "contextParallel" (int $t.contextParallel)
  "expertParallel" (int $t.expertParallel)
  "expertTensorParallel" (default $tp (int $t.expertTensorParallel))
  "sequenceParallel" (and (gt $tp 1) $t.sequenceParallel)
  "dataParallel" (div $actorGpus (max 1 $tpc))) -}}
{{- end -}}

{{/*
miles.knownProfiles: the architecture of the miles model profiles the chart knows, as printed by
upstream's model_args_utils.py <profile> at miles v0.1.0 (num-layers, num-attention-heads,
num-query-groups, num-experts). Megatron checks these against the parallel layout only when it builds
the model, hours into an install; the chart checks them at render.
*/}}
{{- define "miles.knownProfiles" -}}
{{- toJson (dict
  "qwen3-0.6B" (dict "numLayers" 28 "numAttentionHeads" 16 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-1.7B" (dict "numLayers" 28 "numAttentionHeads" 16 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-4B" (dict "numLayers" 36 "numAttentionHeads" 32 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-4B-Instruct-2507" (dict "numLayers" 36 "numAttentionHeads" 32 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-8B" (dict "numLayers" 36 "numAttentionHeads" 32 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-14B" (dict "numLayers" 40 "numAttentionHeads" 40 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-32B" (dict "numLayers" 64 "numAttentionHeads" 64 "numQueryGroups" 8 "numExperts" 0)
  "qwen3-30B-A3B" (dict "numLayers" 48 "numAttentionHeads" 32 "numQueryGroups" 4 "numExperts" 128)
  "qwen3-235B-A22B" (dict "numLayers" 94 "numAttentionHeads" 64 "numQueryGroups" 4 "numExperts" 128)) -}}
{{- end -}}

{{/*
miles.architecture: the model's architecture as JSON: model.architecture where set, else the known
profile's; "known" is false when neither says (the architecture rules are then skipped).
*/}}
{{- define "miles.architecture" -}}
{{- $known := get (include "miles.knownProfiles" . | fromJson) .Values.model.profile -}}
{{- $arch := merge (deepCopy (default (dict) .Values.model.architecture)) (default (dict) $known) -}}
{{- $full := and (hasKey $arch "numLayers") (hasKey $arch "numAttentionHeads") (hasKey $arch "numQueryGroups") (hasKey $arch "numExperts") -}}
{{- toJson (dict
  "known" $full
  "numLayers" (int (default 0 $arch.numLayers))
  "numAttentionHeads" (int (default 0 $arch.numAttentionHeads))
  "numQueryGroups" (int (default 0 $arch.numQueryGroups))
  "numExperts" (int (default 0 $arch.numExperts))) -}}
{{- end -}}

{{/*
miles.checkpointBudget: the space the run needs on the shared volume, as JSON (bytes, int64):
  savedCheckpoints: the most checkpoints on disk at once. miles saves after rollout r (ids from 0)
    when (r+1) % saveInterval == 0 and after the last rollout (miles/utils/misc.py
    should_run_periodic_action; epoch boundaries, which depend on the dataset size, are not counted);
    with --save-retain-interval R Megatron deletes the previous checkpoint after writing the next
    unless its id is 0 or a multiple of R (megatron/training/checkpointing.py).
  checkpointBytes: parameterCount × recipe.checkpoint.bytesPerParameter per checkpoint
  hfBytes, torchDistBytes: parameterCount × 2 each (bf16 weights)
*/}}
{{- define "miles.checkpointBudget" -}}
{{- $v := .Values -}}
{{- $n := int $v.recipe.numRollout -}}
{{- $every := int $v.recipe.saveInterval -}}
{{- $retain := int $v.recipe.checkpoint.retainInterval -}}
{{- $kept := list -}}
{{- $peak := 0 -}}
{{- range $r := until $n -}}
{{- if or (eq (mod (add $r 1) $every) 0) (eq $r (sub $n 1)) -}}
{{- $kept = append $kept $r -}}
{{- $peak = max $peak (len $kept) -}}
{{- if and (gt $retain 0) (ge (len $kept) 2) -}}
{{- $prev := index $kept (sub (len $kept) 2) -}}
{{- if and (gt $prev 0) (ne (mod $prev $retain) 0) -}}
{{- $kept = without $kept $prev -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $params := int64 $v.model.parameterCount -}}
{{- $perCheckpoint := mul $params (int64 $v.recipe.checkpoint.bytesPerParameter) -}}
{{- $weights := mul $params 2 -}}
{{- toJson (dict
  "savedCheckpoints" $peak
  "checkpointBytes" $perCheckpoint
  "hfBytes" $weights
  "torchDistBytes" $weights
  "totalBytes" (add (mul $peak $perCheckpoint) $weights $weights)) -}}
{{- end -}}

{{/*
miles.validate: every value check, collected and reported in ONE fail (field, expected, found).
Included at the top of every template so a bad value never renders a partial release.
*/}}
{{- define "miles.validate" -}}
{{- $v := .Values -}}
{{- $t := $v.topology -}}
{{- $topo := include "miles.topology" . | fromJson -}}
{{- $e := list -}}
{{- $actorGpus := int $topo.actorGpus -}}
{{- $perEngine := int $t.rolloutGpusPerEngine -}}
{{- $gpw := int $t.gpusPerWorker -}}
{{- if ne 0 (mod (int $t.rolloutGpus) $perEngine) -}}
{{- $e = append $e (printf "topology.rolloutGpus: expected a multiple of topology.rolloutGpusPerEngine (%d), found %d" $perEngine (int $t.rolloutGpus)) -}}
{{- end -}}
{{- if gt $perEngine $gpw -}}
{{- $e = append $e (printf "topology.rolloutGpusPerEngine: expected at most topology.gpusPerWorker (%d), found %d" $gpw $perEngine) -}}
{{- else if ne 0 (mod $gpw $perEngine) -}}
{{- $e = append $e (printf "topology.rolloutGpusPerEngine: expected a divisor of topology.gpusPerWorker (%d), found %d" $gpw $perEngine) -}}
{{- end -}}
{{- /* --num-gpus-per-node is the pod's GPUs, and miles derives each actor's local rank from it (miles/ray/train_actor.py) */ -}}
{{- if ne (int $t.actorGpusPerNode) $gpw -}}
{{- $e = append $e (printf "topology.actorGpusPerNode: expected topology.gpusPerWorker (%d): each actor node is one whole worker pod, found %d" $gpw (int $t.actorGpusPerNode)) -}}
{{- end -}}
{{- if and $t.colocate (ne (int $t.rolloutGpus) $actorGpus) -}}
{{- $e = append $e (printf "topology.rolloutGpus: expected actorNodes × actorGpusPerNode = %d when topology.colocate is true, found %d" $actorGpus (int $t.rolloutGpus)) -}}
{{- end -}}
{{- $tpc := mul (int $t.tensorParallel) (int $t.pipelineParallel) (int $t.contextParallel) -}}
{{- if ne 0 (mod $actorGpus $tpc) -}}
{{- $e = append $e (printf "topology.tensorParallel×pipelineParallel×contextParallel: expected a divisor of the actor GPUs (%d), found %d" $actorGpus $tpc) -}}
{{- end -}}
{{- /* megatron/core/parallel_state.py initialize_model_parallel: the expert layout is ETP×EP×PP */ -}}
{{- $etp := int $topo.expertTensorParallel -}}
{{- $epLayout := mul $etp (int $t.expertParallel) (int $t.pipelineParallel) -}}
{{- if ne 0 (mod $actorGpus $epLayout) -}}
{{- $e = append $e (printf "topology.expertParallel: expected expertTensorParallel×expertParallel×pipelineParallel (%d×%d×%d = %d) to divide the actor GPUs (%d) (Megatron's expert layout)" $etp (int $t.expertParallel) (int $t.pipelineParallel) $epLayout $actorGpus) -}}
{{- end -}}
{{- $arch := include "miles.architecture" . | fromJson -}}
{{- if $arch.known -}}
{{- $moe := gt (int $arch.numExperts) 0 -}}
{{- /* megatron/core/transformer/attention.py: heads and query groups are split across TP ranks */ -}}
{{- if ne 0 (mod (int $arch.numAttentionHeads) (int $t.tensorParallel)) -}}
{{- $e = append $e (printf "topology.tensorParallel: expected a divisor of the model's %d attention heads (profile %s), found %d" (int $arch.numAttentionHeads) $v.model.profile (int $t.tensorParallel)) -}}
{{- end -}}
{{- if ne 0 (mod (int $arch.numQueryGroups) (int $t.tensorParallel)) -}}
{{- $e = append $e (printf "topology.tensorParallel: expected a divisor of the model's %d query groups (profile %s), found %d" (int $arch.numQueryGroups) $v.model.profile (int $t.tensorParallel)) -}}
{{- end -}}
{{- /* megatron/training/arguments.py validate_args: layers split evenly across pipeline stages */ -}}
{{- if ne 0 (mod (int $arch.numLayers) (int $t.pipelineParallel)) -}}
{{- $e = append $e (printf "topology.pipelineParallel: expected a divisor of the model's %d layers (profile %s), found %d" (int $arch.numLayers) $v.model.profile (int $t.pipelineParallel)) -}}
{{- end -}}
{{- /* megatron/training/arguments.py validate_args: expert parallelism needs experts, in equal shares */ -}}
{{- if and (gt (int $t.expertParallel) 1) (not $moe) -}}
{{- $e = append $e (printf "topology.expertParallel: expected 1 for the dense model of profile %s (no experts to distribute), found %d" $v.model.profile (int $t.expertParallel)) -}}
{{- else if and $moe (ne 0 (mod (int $arch.numExperts) (int $t.expertParallel))) -}}
{{- $e = append $e (printf "topology.expertParallel: expected a divisor of the model's %d experts (profile %s), found %d" (int $arch.numExperts) $v.model.profile (int $t.expertParallel)) -}}
{{- end -}}
{{- /* megatron/core/transformer/moe/moe_layer.py MoELayer.forward raises in training when TP > 1 without sequence parallelism */ -}}
{{- if and $moe (gt (int $t.tensorParallel) 1) (not $t.sequenceParallel) -}}
{{- $e = append $e (printf "topology.sequenceParallel: expected true for the MoE model of profile %s with tensorParallel %d (Megatron's MoE layer refuses to train with TP > 1 and no sequence parallelism), found false" $v.model.profile (int $t.tensorParallel)) -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int $t.expertTensorParallel) 0) (eq (int $t.expertParallel) 1) (ne (int $t.expertTensorParallel) (int $t.tensorParallel)) -}}
{{- $e = append $e (printf "topology.expertTensorParallel: expected 0 (or tensorParallel) without expert parallelism, found %d" (int $t.expertTensorParallel)) -}}
{{- end -}}
{{- $r := $v.recipe -}}
{{- $lhs := mul (int $r.rolloutBatchSize) (int $r.nSamplesPerPrompt) -}}
{{- $rhs := mul (int $r.globalBatchSize) (int $r.numStepsPerRollout) -}}
{{- if ne $lhs $rhs -}}
{{- $e = append $e (printf "recipe.globalBatchSize: expected rolloutBatchSize×nSamplesPerPrompt (%d×%d = %d) to equal globalBatchSize×numStepsPerRollout, found %d×%d = %d" (int $r.rolloutBatchSize) (int $r.nSamplesPerPrompt) $lhs (int $r.globalBatchSize) (int $r.numStepsPerRollout) $rhs) -}}
{{- end -}}
{{- /* megatron/core/num_microbatches_calculator.py: the global batch splits over the data-parallel ranks */ -}}
{{- if ne 0 (mod (int $r.globalBatchSize) (int $topo.dataParallel)) -}}
{{- $e = append $e (printf "recipe.globalBatchSize: expected a multiple of the data-parallel size (actor GPUs %d ÷ (TP×PP×CP) = %d), found %d" $actorGpus (int $topo.dataParallel) (int $r.globalBatchSize)) -}}
{{- end -}}
{{- /* megatron/training/arguments.py validate_args: save_retain_interval % save_interval == 0 */ -}}
{{- $retain := int $r.checkpoint.retainInterval -}}
{{- if and (gt $retain 0) (ne 0 (mod $retain (int $r.saveInterval))) -}}
{{- $e = append $e (printf "recipe.checkpoint.retainInterval: expected a multiple of recipe.saveInterval (%d), found %d" (int $r.saveInterval) $retain) -}}
{{- end -}}
{{- if and (gt (int $r.sglangExpertParallel) 0) (ne 0 (mod $perEngine (int $r.sglangExpertParallel))) -}}
{{- $e = append $e (printf "recipe.sglangExpertParallel: expected a divisor of topology.rolloutGpusPerEngine (%d, the SGLang engine's tensor-parallel size), found %d" $perEngine (int $r.sglangExpertParallel)) -}}
{{- end -}}
{{- /* miles/ray/placement_group.py: one {GPU: 1, CPU: 1} bundle per actor or rollout GPU on the workers */ -}}
{{- $workerCpu := include "miles.quantityBytes" (default "" $v.rayCluster.workers.resources.requests.cpu) | float64 -}}
{{- if and (eq $v.mode "rayCluster") (ge $workerCpu 0.0) (lt $workerCpu (float64 $gpw)) -}}
{{- $e = append $e (printf "rayCluster.workers.resources.requests.cpu: expected at least topology.gpusPerWorker (%d): miles places one CPU with each GPU, found %s" $gpw (toString $v.rayCluster.workers.resources.requests.cpu)) -}}
{{- end -}}
{{- /* miles/utils/http_utils.py init_http_client: --use-distributed-post pins an HTTP actor (0.001 CPU) to every Ray node, the head included, and a 0-CPU head never schedules it */ -}}
{{- if and (eq $v.mode "rayCluster") (eq (int $v.rayCluster.head.gpus) 0) (has "--use-distributed-post" $r.extraArgs) -}}
{{- $e = append $e "recipe.extraArgs: expected no --use-distributed-post with a CPU head (rayCluster.head.gpus 0 starts the head with num-cpus 0, and miles pins one HTTP actor to every Ray node: the run would wait for it for ever), found --use-distributed-post" -}}
{{- end -}}
{{- if and (eq $r.entrypoint "train_async.py") $t.colocate -}}
{{- $e = append $e "recipe.entrypoint: expected train.py when topology.colocate is true (train_async.py refuses --colocate), found train_async.py" -}}
{{- end -}}
{{- if and (eq $r.reward.type "remote_rm") (not $r.reward.url) (not $v.reward.enabled) -}}
{{- $e = append $e "recipe.reward.url: expected a URL (or reward.enabled: true) when recipe.reward.type is remote_rm, found none" -}}
{{- end -}}
{{- if and $r.tracking.wandb.enabled (not $v.secrets.wandb.existingSecret) -}}
{{- $e = append $e "secrets.wandb.existingSecret: expected a Secret name when recipe.tracking.wandb.enabled is true, found none" -}}
{{- end -}}
{{- if eq $v.mode "singleNode" -}}
{{- /* miles/utils/external_utils/command_utils.py get_default_wandb_args: with WANDB_API_KEY in its env the launcher puts --wandb-key <value> on the job's command line */ -}}
{{- if $v.secrets.wandb.existingSecret -}}
{{- $e = append $e (printf "secrets.wandb.existingSecret: expected none when mode is singleNode (upstream's launcher copies WANDB_API_KEY into the Ray job's command line as --wandb-key, where ray job list and the logs show it), found %q" $v.secrets.wandb.existingSecret) -}}
{{- end -}}
{{- if gt (int $t.actorNodes) 1 -}}
{{- $e = append $e (printf "topology.actorNodes: expected 1 when mode is singleNode, found %d" (int $t.actorNodes)) -}}
{{- end -}}
{{- if not $t.colocate -}}
{{- $e = append $e "topology.colocate: expected true when mode is singleNode (the upstream launcher always passes --colocate), found false" -}}
{{- end -}}
{{- $hf := include "miles.hfPath" . -}}
{{- if ne (base $hf) $v.singleNode.modelName -}}
{{- $e = append $e (printf "singleNode.modelName: expected the directory name of the HF checkpoint (%q, from model.hfPath %s; the launcher reads <model-dir>/<model-name>), found %q" (base $hf) $hf $v.singleNode.modelName) -}}
{{- end -}}
{{- if ne (include "miles.torchDistPath" .) (printf "%s_torch_dist" $hf) -}}
{{- $e = append $e (printf "model.torchDistPath: expected %s_torch_dist when mode is singleNode (the launcher's --ref-load), found %s" $hf (include "miles.torchDistPath" .)) -}}
{{- end -}}
{{- end -}}
{{- $headShm := include "miles.quantityBytes" $v.rayCluster.head.shmSize | float64 -}}
{{- $headMem := include "miles.quantityBytes" (default "" $v.rayCluster.head.resources.limits.memory) | float64 -}}
{{- if or (lt $headShm 0.0) (lt $headMem 0.0) -}}
{{- $e = append $e (printf "rayCluster.head.shmSize / rayCluster.head.resources.limits.memory: expected Kubernetes quantities, found %q / %q" (toString $v.rayCluster.head.shmSize) (toString $v.rayCluster.head.resources.limits.memory)) -}}
{{- else if gt $headShm $headMem -}}
{{- $e = append $e (printf "rayCluster.head.shmSize: expected at most rayCluster.head.resources.limits.memory (%s), found %s" (toString $v.rayCluster.head.resources.limits.memory) (toString $v.rayCluster.head.shmSize)) -}}
{{- end -}}
{{- $wShm := include "miles.quantityBytes" $v.rayCluster.workers.shmSize | float64 -}}
{{- $wMem := include "miles.quantityBytes" (default "" $v.rayCluster.workers.resources.limits.memory) | float64 -}}
{{- if and (ge $wShm 0.0) (ge $wMem 0.0) (gt $wShm $wMem) -}}
{{- $e = append $e (printf "rayCluster.workers.shmSize: expected at most rayCluster.workers.resources.limits.memory (%s), found %s" (toString $v.rayCluster.workers.resources.limits.memory) (toString $v.rayCluster.workers.shmSize)) -}}
{{- end -}}
{{- $full := include "miles.fullname" . -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) -}}
{{- $e = append $e (printf "fullnameOverride (or the release name): expected a DNS-1035 name (lowercase letters, digits, '-', starting with a letter), found %q" $full) -}}
{{- end -}}
{{- $rcName := default $full $v.rayCluster.name -}}
{{- $maxLen := 53 -}}
{{- if and (eq $v.rayCluster.upgradeStrategy.type "Recreate") (eq $v.rayCluster.upgradeStrategy.method "nameHash") -}}{{- $maxLen = 44 -}}{{- end -}}
{{- if gt (len $rcName) $maxLen -}}
{{- $e = append $e (printf "rayCluster.name: expected at most %d characters (53 minus the 9-character template hash with upgradeStrategy nameHash), found %d (%q)" $maxLen (len $rcName) $rcName) -}}
{{- else if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $rcName) -}}
{{- $e = append $e (printf "rayCluster.name: expected a DNS-1035 name starting with a letter, found %q" $rcName) -}}
{{- end -}}
{{- $s := $v.storage -}}
{{- if and (eq $s.type "existingClaim") (not $s.existingClaim) -}}
{{- $e = append $e "storage.existingClaim: expected a PVC name when storage.type is existingClaim, found none" -}}
{{- end -}}
{{- if eq $s.type "fsxStatic" -}}
{{- range $k := list "fileSystemId" "dnsName" "mountName" -}}
{{- if not (get $s.fsxStatic $k) -}}
{{- $e = append $e (printf "storage.fsxStatic.%s: expected a value when storage.type is fsxStatic, found none" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq $s.type "fsxDynamic" -}}
{{- if not $s.fsxDynamic.subnetId -}}
{{- $e = append $e "storage.fsxDynamic.subnetId: expected a subnet id when storage.type is fsxDynamic, found none" -}}
{{- end -}}
{{- if not $s.fsxDynamic.securityGroupIds -}}
{{- $e = append $e "storage.fsxDynamic.securityGroupIds: expected at least one security group when storage.type is fsxDynamic, found none" -}}
{{- end -}}
{{- end -}}
{{- if ne $s.type "existingClaim" -}}
{{- $capacity := include "miles.quantityBytes" (ternary $s.fsxStatic.capacity $s.fsxDynamic.capacity (eq $s.type "fsxStatic")) | float64 -}}
{{- $budget := include "miles.checkpointBudget" . | fromJson -}}
{{- if and (gt $capacity 0.0) (gt (float64 $budget.totalBytes) $capacity) -}}
{{- $e = append $e (printf "storage.%s.capacity: expected room for the run's %s (%d checkpoint(s) on disk at once × %s + HF %s + torch_dist %s; model.parameterCount %d × %d bytes per saved parameter), found %s; raise the capacity, set recipe.checkpoint.retainInterval, or save less often (recipe.saveInterval)" $s.type (include "miles.humanBytes" $budget.totalBytes) (int $budget.savedCheckpoints) (include "miles.humanBytes" $budget.checkpointBytes) (include "miles.humanBytes" $budget.hfBytes) (include "miles.humanBytes" $budget.torchDistBytes) (int64 $v.model.parameterCount) (int $r.checkpoint.bytesPerParameter) (toString (ternary $s.fsxStatic.capacity $s.fsxDynamic.capacity (eq $s.type "fsxStatic")))) -}}
{{- end -}}
{{- end -}}
{{- if and $v.rayCluster.gcsFaultTolerance.enabled (not $v.rayCluster.gcsFaultTolerance.redisAddress) -}}
{{- $e = append $e "rayCluster.gcsFaultTolerance.redisAddress: expected host:port when GCS fault tolerance is enabled, found none" -}}
{{- end -}}
{{- if lt (int $v.hooks.waitReady.activeDeadlineSeconds) (int $v.checks.waitReadyTimeoutSeconds) -}}
{{- $e = append $e (printf "hooks.waitReady.activeDeadlineSeconds: expected at least checks.waitReadyTimeoutSeconds (%d), found %d" (int $v.checks.waitReadyTimeoutSeconds) (int $v.hooks.waitReady.activeDeadlineSeconds)) -}}
{{- end -}}
{{- if and (eq $v.reward.backend "reward_model") (not $v.reward.modelPath) -}}
{{- $e = append $e "reward.modelPath: expected a model directory when reward.backend is reward_model, found none" -}}
{{- end -}}
{{- if $e -}}
{{- fail (printf "\n\nmiles: %d invalid value(s):\n  - %s\n" (len $e) (join "\n  - " $e)) -}}
{{- end -}}
{{- end -}}
