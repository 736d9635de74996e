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
{{- if ne .Values.mode "singleNode" -}}{{- $headGpus = int .Values.rayCluster.head.gpus -}}{{- end -}}
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
{{- /* saves: after rollouts j*every-1 (j = 1..n/every), and after the last rollout when that is not one */ -}}
{{- $saves := add (div $n $every) (ternary 1 0 (ne (mod $n $every) 0)) -}}
{{- $peak := $saves -}}
{{- if and (gt $retain 0) (ge $saves 2) -}}
{{- /* Checkpoint s is kept for good when s % retain == 0 (id 0 included); any other is deleted once the next
     is written, so the peak is right after the last save: the kept ones before it, the one before it if
     that one is not kept for good, and itself. One pass over the saves, no list: linear in their number. */ -}}
{{- $keptForGood := 0 -}}
{{- range $j := untilStep 1 (int $saves) 1 -}}
{{- if eq (mod (sub (mul $j $every) 1) $retain) 0 }}{{ $keptForGood = add1 $keptForGood }}{{ end -}}
{{- end -}}
{{- $beforeLast := sub (mul (sub $saves 1) $every) 1 -}}
{{- $peak = add 1 $keptForGood (ternary 0 1 (eq (mod $beforeLast $retain) 0)) -}}
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

{{/* miles.pools: JSON {head|worker|convert|export|reward|hooks: {nodeSelector, tolerations}} after presets; the
convert and export pods' pools are the workers' with hooks.convert's / hooks.export's own labels (which win) and
tolerations added. */}}
{{- define "miles.pools" -}}
{{- $v := .Values -}}
{{- $headSel := deepCopy $v.rayCluster.head.nodeSelector -}}
{{- $workerSel := deepCopy $v.gpuPods.nodeSelector -}}
{{- $rewardSel := deepCopy $v.reward.nodeSelector -}}
{{- $headTol := $v.rayCluster.head.tolerations -}}
{{- $workerTol := $v.gpuPods.tolerations -}}
{{- $rewardTol := $v.reward.tolerations -}}
{{- $hooksSel := deepCopy $v.hooks.nodeSelector -}}
{{- $hooksTol := $v.hooks.tolerations -}}
{{- if eq $v.cluster.preset "hyperpod" -}}
{{- $hp := $v.cluster.hyperpod -}}
{{- $health := dict "sagemaker.amazonaws.com/node-health-status" "Schedulable" -}}
{{- $headSel = merge $headSel $health -}}
{{- $workerSel = merge $workerSel $health -}}
{{- $rewardSel = merge $rewardSel $health -}}
{{- $hooksSel = merge $hooksSel $health -}}
{{- with $hp.workerInstanceGroup -}}{{- $_ := set $workerSel "sagemaker.amazonaws.com/instance-group-name" . -}}{{- end -}}
{{- with $hp.headInstanceGroup -}}
{{- $_ := set $headSel "sagemaker.amazonaws.com/instance-group-name" . -}}
{{- if not (hasKey $v.hooks.nodeSelector "sagemaker.amazonaws.com/instance-group-name") -}}{{- $_ := set $hooksSel "sagemaker.amazonaws.com/instance-group-name" . -}}{{- end -}}
{{- end -}}
{{- with $hp.rewardInstanceGroup -}}{{- $_ := set $rewardSel "sagemaker.amazonaws.com/instance-group-name" . -}}{{- end -}}
{{- $tol := dict "key" "sagemaker.amazonaws.com/node-health-status" "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int $hp.healthTaintTolerationSeconds) -}}
{{- $headTol = append $headTol $tol -}}
{{- $workerTol = append $workerTol $tol -}}
{{- $rewardTol = append $rewardTol $tol -}}
{{- $hooksTol = append $hooksTol $tol -}}
{{- end -}}
{{- $convertSel := merge (deepCopy $v.hooks.convert.nodeSelector) $workerSel -}}
{{- $convertTol := concat $workerTol $v.hooks.convert.tolerations -}}
{{- $exportSel := merge (deepCopy $v.hooks.export.nodeSelector) $workerSel -}}
{{- $exportTol := concat $workerTol $v.hooks.export.tolerations -}}
{{- toJson (dict
  "head" (dict "nodeSelector" $headSel "tolerations" $headTol)
  "worker" (dict "nodeSelector" $workerSel "tolerations" $workerTol)
  "convert" (dict "nodeSelector" $convertSel "tolerations" $convertTol)
  "export" (dict "nodeSelector" $exportSel "tolerations" $exportTol)
  "reward" (dict "nodeSelector" $rewardSel "tolerations" $rewardTol)
  "hooks" (dict "nodeSelector" $hooksSel "tolerations" $hooksTol)) -}}
{{- end -}}
