{{/*
miles.topology: the single source of topology arithmetic (DESIGN.md "Topologies"), as JSON.
Hooks never recompute it; they read it from the run spec.
  colocated:      workerReplicas = actorNodes
  disaggregated:  workerReplicas = actorNodes + ceil(rolloutEngines / enginesPerWorker)
                  rolloutEngines = rolloutGpus / rolloutGpusPerEngine
                  enginesPerWorker = gpusPerWorker / rolloutGpusPerEngine
  singleNode:     one pod with all GPUs of one node (workerReplicas = 1)
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
  "tensorParallel" (int $t.tensorParallel)
  "pipelineParallel" (int $t.pipelineParallel)
  "contextParallel" (int $t.contextParallel)
  "expertParallel" (int $t.expertParallel)) -}}
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
{{- if gt (int $t.actorGpusPerNode) $gpw -}}
{{- $e = append $e (printf "topology.actorGpusPerNode: expected at most topology.gpusPerWorker (%d), found %d" $gpw (int $t.actorGpusPerNode)) -}}
{{- end -}}
{{- if and $t.colocate (ne (int $t.rolloutGpus) $actorGpus) -}}
{{- $e = append $e (printf "topology.rolloutGpus: expected actorNodes × actorGpusPerNode = %d when topology.colocate is true, found %d" $actorGpus (int $t.rolloutGpus)) -}}
{{- end -}}
{{- $tpc := mul (int $t.tensorParallel) (int $t.pipelineParallel) (int $t.contextParallel) -}}
{{- if ne 0 (mod $actorGpus $tpc) -}}
{{- $e = append $e (printf "topology.tensorParallel×pipelineParallel×contextParallel: expected a divisor of the actor GPUs (%d), found %d" $actorGpus $tpc) -}}
{{- end -}}
{{- $tpe := mul (int $t.tensorParallel) (int $t.pipelineParallel) (int $t.expertParallel) -}}
{{- if ne 0 (mod $actorGpus $tpe) -}}
{{- $e = append $e (printf "topology.expertParallel: expected tensorParallel×pipelineParallel×expertParallel to divide the actor GPUs (%d), found %d" $actorGpus $tpe) -}}
{{- end -}}
{{- $r := $v.recipe -}}
{{- $lhs := mul (int $r.rolloutBatchSize) (int $r.nSamplesPerPrompt) -}}
{{- $rhs := mul (int $r.globalBatchSize) (int $r.numStepsPerRollout) -}}
{{- if ne $lhs $rhs -}}
{{- $e = append $e (printf "recipe.globalBatchSize: expected rolloutBatchSize×nSamplesPerPrompt (%d×%d = %d) to equal globalBatchSize×numStepsPerRollout, found %d×%d = %d" (int $r.rolloutBatchSize) (int $r.nSamplesPerPrompt) $lhs (int $r.globalBatchSize) (int $r.numStepsPerRollout) $rhs) -}}
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
