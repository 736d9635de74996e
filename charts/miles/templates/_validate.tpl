{{/*
miles.validate: every rule on the values that the schema cannot express, in ONE place, collected and
reported in ONE fail: each message names the field, what was expected and what was found (and, for a
moved or removed key, what to write instead). Included at the top of every manifest, so a bad value
never renders a partial release. values.schema.json checks types, enums and patterns first.
*/}}
{{- define "miles.validate" -}}
{{- $v := .Values -}}
{{- $t := $v.topology -}}
{{- $topo := include "miles.topology" . | fromJson -}}
{{- $e := list -}}
{{- /* credentials only by reference (see the checks at the end): names that say credential, and values shaped like one */ -}}
{{- $credentialName := "(?i)(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?|PAT)(_|$)|_(KEY|AUTH)$" -}}
{{- /* each shape of a token, key or URL with a password, after the literal it starts with (a cheap first test) */ -}}
{{- $credentialShapes := list (list "hf_" "hf_[A-Za-z0-9]{30,}") (list "AKIA" "AKIA[0-9A-Z]{16}") (list "ASIA" "ASIA[0-9A-Z]{16}") (list "gh" "gh[pousr]_[A-Za-z0-9]{36,}") (list "github_pat_" "github_pat_[A-Za-z0-9_]{22,}") (list "sk-" "sk-[A-Za-z0-9_-]{20,}") (list "xox" "xox[abprs]-[A-Za-z0-9-]{10,}") (list "-----BEGIN" "-----BEGIN [A-Z ]*PRIVATE KEY-----") (list "://" "://[^/@\\s:]+:[^/@\\s]+@") (list "eyJ" "eyJ[A-Za-z0-9_-]{10,}\\.[A-Za-z0-9_-]{10,}\\.") -}}
{{- $credentialValue := list -}}
{{- range $credentialShapes }}{{ $credentialValue = append $credentialValue (index . 1) }}{{ end -}}
{{- $credentialValue = join "|" $credentialValue -}}
{{- $credentialFlag := "(?i)^--[a-z0-9-]*(wandb-key|api-key|(hf|auth|access|api|bearer)[-_]token|password|passwd|passphrase|secret)(=|$)" -}}
{{- /* keys that moved (a values file written for an earlier chart): each names its new place */ -}}
{{- range $m := list
  (list $v.rayCluster.workers "rayCluster.workers" "gpuResource" "gpuPods.gpuResource")
  (list $v.rayCluster.workers "rayCluster.workers" "efa" "gpuPods.efa")
  (list $v.rayCluster.workers "rayCluster.workers" "nccl" "gpuPods.nccl")
  (list $v.rayCluster.workers "rayCluster.workers" "shmSize" "gpuPods.shmSize")
  (list $v.rayCluster.workers "rayCluster.workers" "nodeSelector" "gpuPods.nodeSelector")
  (list $v.rayCluster.workers "rayCluster.workers" "tolerations" "gpuPods.tolerations")
  (list $v.rayCluster.workers "rayCluster.workers" "affinity" "gpuPods.affinity")
  (list $v.rayCluster.workers "rayCluster.workers" "annotations" "gpuPods.annotations")
  (list $v "" "gpuSecurityContext" "gpuPods.securityContext")
  (list $v "" "gpuPodSecurityContext" "gpuPods.podSecurityContext") -}}
{{- $old := trimPrefix "." (printf "%s.%s" (index $m 1) (index $m 2)) -}}
{{- if hasKey (index $m 0) (index $m 2) -}}
{{- $e = append $e (printf "%s: expected %s instead (moved: the settings the Ray workers and the single-node pod share live in gpuPods), found %s set; move its value to %s and delete %s" $old (index $m 3) $old (index $m 3) $old) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $v.hooks.rbac "apiDryRunAnnotations" -}}
{{- $e = append $e "hooks.rbac.apiDryRunAnnotations: expected hooks.rbac.preflightAnnotations instead (renamed: that Role now holds everything preflight alone needs, the dry run and the Ray token Secret), found hooks.rbac.apiDryRunAnnotations set; move its value to hooks.rbac.preflightAnnotations and delete hooks.rbac.apiDryRunAnnotations" -}}
{{- end -}}
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
{{- if and (ne $v.mode "singleNode") (ge $workerCpu 0.0) (lt $workerCpu (float64 $gpw)) -}}
{{- $e = append $e (printf "rayCluster.workers.resources.requests.cpu: expected at least topology.gpusPerWorker (%d): miles places one CPU with each GPU, found %s" $gpw (include "miles.quantityText" $v.rayCluster.workers.resources.requests.cpu)) -}}
{{- end -}}
{{- /* miles/utils/http_utils.py init_http_client: --use-distributed-post pins an HTTP actor (0.001 CPU) to every Ray node, the head included, and a 0-CPU head never schedules it */ -}}
{{- if and (ne $v.mode "singleNode") (eq (int $v.rayCluster.head.gpus) 0) (has "--use-distributed-post" $r.extraArgs) -}}
{{- $e = append $e "recipe.extraArgs: expected no --use-distributed-post with a CPU head (rayCluster.head.gpus 0 starts the head with num-cpus 0, and miles pins one HTTP actor to every Ray node: the run would wait for it for ever), found --use-distributed-post" -}}
{{- end -}}
{{- if and (eq $r.entrypoint "train_async.py") $t.colocate -}}
{{- $e = append $e "recipe.entrypoint: expected train.py when topology.colocate is true (train_async.py refuses --colocate), found train_async.py" -}}
{{- end -}}
{{- if and (eq $r.reward.type "remote_rm") (not $r.reward.url) (not $v.reward.enabled) -}}
{{- $e = append $e "recipe.reward.url: expected a URL (or reward.enabled: true) when recipe.reward.type is remote_rm, found none" -}}
{{- end -}}
{{- if $v.secrets.rayAuth.enabled -}}
{{- if not (semverCompare ">=2.52.0-0" (toString $v.rayCluster.rayVersion)) -}}
{{- $e = append $e (printf "rayCluster.rayVersion: expected 2.52.0 or later when secrets.rayAuth.enabled is true (Ray ignores RAY_AUTH_MODE before 2.52 and would run unauthenticated), found %q; use an image with Ray >= 2.52 or set secrets.rayAuth.enabled: false" (toString $v.rayCluster.rayVersion)) -}}
{{- end -}}
{{- if and (not $v.secrets.rayAuth.existingSecret) (not (and $v.hooks.enabled $v.hooks.preflight.enabled)) -}}
{{- $e = append $e (printf "secrets.rayAuth.existingSecret: expected a Secret name when preflight does not run (hooks.enabled %v, hooks.preflight.enabled %v): preflight creates the token Secret otherwise, found none" $v.hooks.enabled $v.hooks.preflight.enabled) -}}
{{- end -}}
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
{{- $e = append $e (printf "rayCluster.head.shmSize / rayCluster.head.resources.limits.memory: expected Kubernetes quantities, found %q / %q" (include "miles.quantityText" $v.rayCluster.head.shmSize) (include "miles.quantityText" $v.rayCluster.head.resources.limits.memory)) -}}
{{- else if gt $headShm $headMem -}}
{{- $e = append $e (printf "rayCluster.head.shmSize: expected at most rayCluster.head.resources.limits.memory (%s), found %s" (include "miles.quantityText" $v.rayCluster.head.resources.limits.memory) (include "miles.quantityText" $v.rayCluster.head.shmSize)) -}}
{{- end -}}
{{- $wShm := include "miles.quantityBytes" $v.gpuPods.shmSize | float64 -}}
{{- $wMem := include "miles.quantityBytes" (default "" $v.rayCluster.workers.resources.limits.memory) | float64 -}}
{{- if and (ge $wShm 0.0) (ge $wMem 0.0) (gt $wShm $wMem) -}}
{{- $e = append $e (printf "gpuPods.shmSize: expected at most rayCluster.workers.resources.limits.memory (%s), found %s" (include "miles.quantityText" $v.rayCluster.workers.resources.limits.memory) (include "miles.quantityText" $v.gpuPods.shmSize)) -}}
{{- end -}}
{{- $full := include "miles.fullname" . -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) -}}
{{- $e = append $e (printf "fullnameOverride (or the release name): expected a DNS-1035 name (lowercase letters, digits, '-', starting with a letter), found %q" $full) -}}
{{- end -}}
{{- $rcName := default $full $v.rayCluster.name -}}
{{- $maxLen := 53 -}}
{{- $upgradeMethod := include "miles.upgradeMethod" . -}}
{{- $hashNote := "53 minus the 9-character template hash with upgradeStrategy method nameHash" -}}
{{- if eq $upgradeMethod "nameHash" -}}{{- $maxLen = 44 -}}{{- end -}}
{{- if eq $v.mode "rayJob" -}}
{{- $maxLen = 38 -}}
{{- $hashNote = "mode rayJob: KubeRay's 47 for a RayJob minus its 9-character job hash" -}}
{{- end -}}
{{- $operator := toString $v.rayCluster.operatorVersion -}}
{{- if not (include "miles.operatorVersionValid" .) -}}
{{- $e = append $e (printf "rayCluster.operatorVersion: expected the KubeRay operator's version as MAJOR.MINOR[.PATCH] (e.g. 1.6.2), found %q" $operator) -}}
{{- else if not (include "miles.kuberaySupported" .) -}}
{{- $e = append $e (printf "rayCluster.operatorVersion: expected 1.5 or newer (the oldest KubeRay the chart supports; upgrade the operator), found %q" $operator) -}}
{{- else if and (eq $upgradeMethod "crd") (not (include "miles.kuberayHas16" .)) -}}
{{- $e = append $e (printf "rayCluster.upgradeStrategy.method: expected nameHash or empty with rayCluster.operatorVersion %s (spec.upgradeStrategy needs KubeRay 1.6 or newer), found crd" $operator) -}}
{{- end -}}
{{- if gt (len $rcName) $maxLen -}}
{{- $e = append $e (printf "rayCluster.name: expected at most %d characters (%s; when empty, the full name counts), found %d (%q)" $maxLen $hashNote (len $rcName) $rcName) -}}
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
{{- /* Kubernetes' own Pod rules on what the values pass through (k8s.io/kubernetes pkg/apis/core/validation): a request may not exceed its limit */ -}}
{{- range $r := list
  (list "rayCluster.head.resources" $v.rayCluster.head.resources)
  (list "rayCluster.workers.resources" $v.rayCluster.workers.resources)
  (list "singleNode.resources" $v.singleNode.resources)
  (list "hooks.resources" $v.hooks.resources)
  (list "hooks.prepareData.resources" $v.hooks.prepareData.resources)
  (list "hooks.convert.resources" $v.hooks.convert.resources)
  (list "reward.resources" $v.reward.resources) -}}
{{- $limits := (index $r 1).limits | default dict -}}
{{- range $name, $req := ((index $r 1).requests | default dict) -}}
{{- if hasKey $limits $name -}}
{{- $rq := include "miles.quantityBytes" $req | float64 -}}
{{- $lm := include "miles.quantityBytes" (get $limits $name) | float64 -}}
{{- if and (ge $rq 0.0) (ge $lm 0.0) (gt $rq $lm) -}}
{{- $e = append $e (printf "%s.requests.%s: expected at most %s.limits.%s (%s), found %s" (index $r 0) $name (index $r 0) $name (include "miles.quantityText" (get $limits $name)) (include "miles.quantityText" $req)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* toleration shapes the API server refuses (validateTolerations) */ -}}
{{- range $tl := list
  (list "gpuPods.tolerations" $v.gpuPods.tolerations)
  (list "rayCluster.head.tolerations" $v.rayCluster.head.tolerations)
  (list "hooks.tolerations" $v.hooks.tolerations)
  (list "reward.tolerations" $v.reward.tolerations) -}}
{{- range $i, $tol := (index $tl 1) | default list -}}
{{- $at := printf "%s[%d]" (index $tl 0) $i -}}
{{- if and (eq (toString $tol.operator) "Exists") $tol.value -}}
{{- $e = append $e (printf "%s.value: expected none when operator is Exists (an Exists toleration matches any value), found %q" $at (toString $tol.value)) -}}
{{- end -}}
{{- if and (not $tol.key) (ne (toString $tol.operator) "Exists") -}}
{{- $e = append $e (printf "%s.operator: expected Exists when key is empty (an empty key tolerates every taint only with Exists), found %q" $at (toString (default "Equal" $tol.operator))) -}}
{{- end -}}
{{- if and (hasKey $tol "tolerationSeconds") (ne (toString $tol.effect) "NoExecute") -}}
{{- $e = append $e (printf "%s.tolerationSeconds: expected only with effect NoExecute (it bounds how long a pod stays after a NoExecute taint), found it with effect %q" $at (toString (default "" $tol.effect))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* /dev/shm is a memory-backed emptyDir: it counts against the pod's memory limit */ -}}
{{- range $p := list
  (list "singleNode.resources.limits.memory" $v.gpuPods.shmSize (dig "limits" "memory" "" $v.singleNode.resources) "gpuPods.shmSize" (eq $v.mode "singleNode"))
  (list "hooks.convert.resources.limits.memory" $v.hooks.convert.shmSize (dig "limits" "memory" "" $v.hooks.convert.resources) "hooks.convert.shmSize" $v.hooks.convert.enabled) -}}
{{- $shm := include "miles.quantityBytes" (index $p 1) | float64 -}}
{{- $mem := include "miles.quantityBytes" (index $p 2) | float64 -}}
{{- if and (index $p 4) (index $p 2) (ge $shm 0.0) (ge $mem 0.0) (gt $shm $mem) -}}
{{- $e = append $e (printf "%s: expected at most %s (%s), found %s" (index $p 3) (index $p 0) (include "miles.quantityText" (index $p 2)) (include "miles.quantityText" (index $p 1))) -}}
{{- end -}}
{{- end -}}
{{- /* an image reference is repository[:tag][@digest]; a repository carrying its own tag or digest renders repo:a:b */ -}}
{{- range $img := list (list "image" $v.image) (list "hooks.image" $v.hooks.image) (list "reward.image" $v.reward.image) -}}
{{- $repo := toString (index $img 1).repository -}}
{{- if or (contains "@" $repo) (contains ":" (last (splitList "/" $repo))) -}}
{{- $e = append $e (printf "%s.repository: expected a repository without tag or digest (set %s.tag or %s.digest), found %q" (index $img 0) (index $img 0) (index $img 0) $repo) -}}
{{- end -}}
{{- end -}}
{{- if and $v.rayCluster.gcsFaultTolerance.enabled $v.rayCluster.gcsFaultTolerance.redisAddress (not (regexMatch "^(redis://|rediss://)?[^:/@]+(:[0-9]{1,5})$" (toString $v.rayCluster.gcsFaultTolerance.redisAddress))) -}}
{{- $redis := toString $v.rayCluster.gcsFaultTolerance.redisAddress -}}
{{- $e = append $e (printf "rayCluster.gcsFaultTolerance.redisAddress: expected host:port (Ray's GCS joins it as given; the password comes from redisPasswordSecret), found %s" (ternary "an address with credentials in it (not shown)" (quote $redis) (contains "@" $redis))) -}}
{{- end -}}
{{- /* the chart's selectors and NetworkPolicies match these labels: a pod label may not replace them */ -}}
{{- range $labels := list (list "scheduling.podLabels" $v.scheduling.podLabels) (list "rayCluster.head.labels" $v.rayCluster.head.labels) (list "rayCluster.workers.labels" $v.rayCluster.workers.labels) -}}
{{- range $k := keys ((index $labels 1) | default dict) | sortAlpha -}}
{{- if or (has $k (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/part-of")) (hasPrefix "ray.io/" $k) -}}
{{- $e = append $e (printf "%s.%s: expected a label the chart does not set (its selectors, NetworkPolicies and KubeRay match on app.kubernetes.io/name, instance, component, part-of and ray.io/*), found %s" (index $labels 0) $k $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $labels := list (list "rayCluster.labels" $v.rayCluster.labels) (list "rayJob.labels" $v.rayJob.labels) (list "rayCluster.podMonitor.labels" $v.rayCluster.podMonitor.labels) (list "reward.podMonitor.labels" $v.reward.podMonitor.labels) (list "dashboards.labels" $v.dashboards.labels) -}}
{{- $path := index $labels 0 -}}
{{- range $k := keys ((index $labels 1) | default dict) | sortAlpha -}}
{{- if or (hasPrefix "app.kubernetes.io/" $k) (hasPrefix "helm.sh/" $k) (hasPrefix "ray.io/" $k) -}}
{{- $e = append $e (printf "%s.%s: expected a label the chart does not set (app.kubernetes.io/*, helm.sh/*, ray.io/*), found %s" $path $k $k) -}}
{{- else if and (has $path (list "rayCluster.labels" "rayJob.labels")) (has $k (list "kueue.x-k8s.io/queue-name" "kueue.x-k8s.io/priority-class")) -}}
{{- $e = append $e (printf "%s.%s: expected scheduling.%s instead (the chart sets that label from it), found %s in %s" $path $k (ternary "kueueQueue" "kueuePriorityClass" (hasSuffix "queue-name" $k)) $k $path) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq $v.mode "rayJob") $v.secrets.rayAuth.enabled -}}
{{- if and (include "miles.operatorVersionValid" .) (not (include "miles.kuberayHas16" .)) -}}
{{- $e = append $e (printf "rayCluster.operatorVersion: expected 1.6 or newer with mode rayJob and secrets.rayAuth.enabled (the operator polls the job through the token-protected dashboard with spec.authOptions, added in KubeRay 1.6), found %q" $operator) -}}
{{- end -}}
{{- if ne (include "miles.rayAuthKey" .) "auth_token" -}}
{{- $e = append $e (printf "secrets.rayAuth.key: expected auth_token (or empty) with mode rayJob (KubeRay reads the token from that key of the Secret), found %q" $v.secrets.rayAuth.key) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $v.mode "rayJob") (eq $v.submit.onChange "fail") -}}
{{- $e = append $e "submit.onChange: expected restart with mode rayJob (a changed run is a new RayJob, and Helm deletes the old one with its cluster), found fail" -}}
{{- end -}}
{{- /* HyperPod's job auto-resume works through the Kubeflow training operator (PyTorchJob): on a RayCluster,
a Job or a pod these annotations promise a recovery nothing performs */ -}}
{{- $annotationMaps := list (list "rayCluster.annotations" $v.rayCluster.annotations) (list "rayCluster.head.annotations" $v.rayCluster.head.annotations) (list "gpuPods.annotations" $v.gpuPods.annotations) (list "scheduling.podAnnotations" $v.scheduling.podAnnotations) -}}
{{- range $step := keys $v.hooks | sortAlpha -}}
{{- $cfg := index $v.hooks $step -}}
{{- if kindIs "map" $cfg -}}
{{- range $field := list "annotations" "podAnnotations" -}}
{{- if kindIs "map" (index $cfg $field) -}}
{{- $annotationMaps = append $annotationMaps (list (printf "hooks.%s.%s" $step $field) (index $cfg $field)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $entry := $annotationMaps -}}
{{- range $k := keys ((index $entry 1) | default dict) | sortAlpha -}}
{{- if has $k (list "sagemaker.amazonaws.com/enable-job-auto-resume" "sagemaker.amazonaws.com/job-max-retry-count") -}}
{{- $e = append $e (printf "%s.%s: expected no HyperPod job auto-resume annotation (HyperPod auto-resumes Kubeflow PyTorchJobs only; for a Ray run it reboots or replaces the faulty node and KubeRay recreates the pods: docs/chart.md, HyperPod), found %s" (index $entry 0) $k $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.scheduling.kueuePriorityClass (not $v.scheduling.kueueQueue) -}}
{{- $e = append $e (printf "scheduling.kueuePriorityClass: expected scheduling.kueueQueue to be set too (Kueue reads a priority class only on workloads it queues), found priority class %q and no queue" (toString $v.scheduling.kueuePriorityClass)) -}}
{{- end -}}
{{- /* what KubeRay's ValidateRayClusterSpec refuses only when it reconciles the RayCluster (or the RayJob's), after
the install, in the operator's log and events (ray-operator v1.6.2 controllers/ray/utils/validation.go:
validateRayGroupLabels, the GCS fault-tolerance and Redis checks, autoscaler v2 without the autoscaler) */ -}}
{{- if ne $v.mode "singleNode" -}}
{{- $rc := $v.rayCluster -}}
{{- range $g := list "head" "workers" -}}
{{- if hasKey ((index $rc $g).rayStartParams | default dict) "labels" -}}
{{- $e = append $e (printf "rayCluster.%s.rayStartParams.labels: expected unset (KubeRay refuses Ray node labels in rayStartParams; it takes them only in the group's labels field, which the chart does not set), found %q" $g (toString (index $rc $g).rayStartParams.labels)) -}}
{{- end -}}
{{- end -}}
{{- if hasKey ($rc.head.rayStartParams | default dict) "redis-username" -}}
{{- $e = append $e "rayCluster.head.rayStartParams.redis-username: expected unset (KubeRay refuses a Redis user name there; GCS fault tolerance takes Redis from rayCluster.gcsFaultTolerance), found one" -}}
{{- end -}}
{{- $ftAnnotations := merge (dict) ($rc.annotations | default dict) (ternary ($v.rayJob.annotations | default dict) dict (eq $v.mode "rayJob")) -}}
{{- range $i, $x := $rc.head.extraEnv | default list -}}
{{- $name := toString $x.name -}}
{{- $at := printf "rayCluster.head.extraEnv[%d] (%s)" $i $name -}}
{{- if eq $name "RAY_REDIS_ADDRESS" -}}
{{- $e = append $e (printf "%s: expected rayCluster.gcsFaultTolerance.enabled and redisAddress instead (KubeRay refuses the variable in the head pod, with or without GCS fault tolerance), found %s" $at $name) -}}
{{- else if eq $name "REDIS_USERNAME" -}}
{{- $e = append $e (printf "%s: expected no Redis user name in the head pod (KubeRay refuses it), found %s" $at $name) -}}
{{- else if and (eq $name "REDIS_PASSWORD") $rc.gcsFaultTolerance.enabled -}}
{{- $e = append $e (printf "%s: expected rayCluster.gcsFaultTolerance.redisPasswordSecret instead with GCS fault tolerance (KubeRay refuses the variable then), found %s" $at $name) -}}
{{- else if and (eq $name "RAY_enable_autoscaler_v2") (has (toString $x.value) (list "1" "true")) -}}
{{- $e = append $e (printf "%s: expected unset (the chart runs fixed worker replicas without KubeRay's autoscaler, and KubeRay refuses autoscaler v2 without it), found %s=%s" $at $name (toString $x.value)) -}}
{{- end -}}
{{- end -}}
{{- if $rc.gcsFaultTolerance.enabled -}}
{{- range $k := list "ray.io/ft-enabled" "ray.io/external-storage-namespace" -}}
{{- if hasKey $ftAnnotations $k -}}
{{- $e = append $e (printf "%s.%s: expected unset with rayCluster.gcsFaultTolerance.enabled (KubeRay refuses the annotation beside GcsFaultToleranceOptions, which the chart sets), found %q" (ternary "rayJob.annotations" "rayCluster.annotations" (hasKey ($v.rayJob.annotations | default dict) $k)) $k (toString (get $ftAnnotations $k))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* what Kueue's webhooks refuse of a workload it queues, only when the RayJob or RayCluster is created (after every pre-install hook): kueue v0.17.0 pkg/controller/jobs/rayjob/rayjob_webhook.go validateCreate (shutdownAfterJobFinishes) and pkg/controller/jobs/raycluster/common.go ValidateCreate (a worker group named "head") */ -}}
{{- if $v.scheduling.kueueQueue -}}
{{- if and (eq $v.mode "rayJob") (not $v.rayJob.shutdownAfterJobFinishes) -}}
{{- $e = append $e "rayJob.shutdownAfterJobFinishes: expected true with scheduling.kueueQueue (Kueue refuses a queued RayJob that keeps its cluster after the run: its quota would stay held), found false" -}}
{{- end -}}
{{- if and (ne $v.mode "singleNode") (eq (toString $v.rayCluster.workers.groupName) "head") -}}
{{- $e = append $e "rayCluster.workers.groupName: expected a name other than head with scheduling.kueueQueue (Kueue reserves it for the head group's pod set), found head" -}}
{{- end -}}
{{- end -}}
{{- /* every file the run reads or writes lives on the shared volume: elsewhere it is lost when the pod exits, and resume breaks */ -}}
{{- $mount := trimSuffix "/" (toString $v.storage.mountPath) -}}
{{- if or (eq $mount "") (eq $mount "/root/miles") (hasPrefix (printf "%s/" $mount) "/root/miles/") (hasPrefix "/root/miles/" $mount) -}}
{{- $e = append $e (printf "storage.mountPath: expected a directory that neither holds nor lies inside /root/miles (the miles image's code), found %q" (toString $v.storage.mountPath)) -}}
{{- end -}}
{{- range $pth := list
  (list "model.hfPath" $v.model.hfPath)
  (list "model.torchDistPath" $v.model.torchDistPath)
  (list "data.promptData" $v.data.promptData)
  (list "output.dir" $v.output.dir)
  (list "reward.modelPath" $v.reward.modelPath) -}}
{{- $val := toString (index $pth 1) -}}
{{- if and (hasPrefix "/" $val) (not (hasPrefix (printf "%s/" $mount) $val)) -}}
{{- $e = append $e (printf "%s: expected a path under storage.mountPath (%s/…) or a relative one, found %q (outside the shared volume: lost when the pod exits, and a resumed run cannot find it)" (index $pth 0) $mount $val) -}}
{{- end -}}
{{- end -}}
{{- range $i, $d := $v.data.evalData | default list -}}
{{- if and (hasPrefix "/" (toString $d.path)) (not (hasPrefix (printf "%s/" $mount) (toString $d.path))) -}}
{{- $e = append $e (printf "data.evalData[%d].path: expected a path under storage.mountPath (%s/…) or a relative one, found %q" $i $mount (toString $d.path)) -}}
{{- end -}}
{{- end -}}
{{- range $i, $d := $v.data.datasets | default list -}}
{{- if and (hasPrefix "/" (toString $d.path)) (not (hasPrefix (printf "%s/" $mount) (toString $d.path))) -}}
{{- $e = append $e (printf "data.datasets[%d].path: expected a path under storage.mountPath (%s/…) or a relative one, found %q" $i $mount (toString $d.path)) -}}
{{- end -}}
{{- end -}}
{{- /* miles' argparse reads "--lr 2e-6" as one unknown flag: each flag and value is its own list item */ -}}
{{- range $i, $a := $r.extraArgs | default list -}}
{{- if and (hasPrefix "--" (toString $a)) (regexMatch "\\s" (toString $a)) -}}
{{- $parts := regexSplit "\\s+" (toString $a) 2 -}}
{{- if or (regexMatch $credentialFlag (index $parts 0)) (regexMatch $credentialValue (toString $a)) -}}
{{- $e = append $e (printf "recipe.extraArgs[%d]: expected one token per item, found %s and its value in one item (not shown)" $i (index $parts 0)) -}}
{{- else -}}
{{- $e = append $e (printf "recipe.extraArgs[%d]: expected one token per item (write [%q, %q]), found %q" $i (index $parts 0) (index $parts 1) (toString $a)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* a setting the chart renders, set again in extraArgs under any spelling miles' parser accepts (the same flag,
  --flag=value, an alias or a negation with the same destination; files/train-flags.json, generated from the pinned
  parser): argparse keeps the last one, silently */ -}}
{{- $trainArgs := include "miles.trainArgs" . | fromJsonArray -}}
{{- $ownArgs := slice $trainArgs 0 (sub (len $trainArgs) (len ($r.extraArgs | default list))) -}}
{{- $parser := $.Files.Get "files/train-flags.json" | fromJson -}}
{{- $destOf := $parser.destOf -}}
{{- /* where each setting comes from; the flags rendered only for some values are here even when not rendered */ -}}
{{- $flagValues := dict "--colocate" "topology.colocate" "--sequence-parallel" "topology.sequenceParallel" "--use-tensorboard" "recipe.tracking.tensorboard" "--use-wandb" "recipe.tracking.wandb.enabled" "--use-fault-tolerance" "recipe.useFaultTolerance" "--actor-num-nodes" "topology.actorNodes" "--tensor-model-parallel-size" "topology.tensorParallel" "--pipeline-model-parallel-size" "topology.pipelineParallel" "--expert-model-parallel-size" "topology.expertParallel" "--rollout-num-gpus" "topology.rolloutGpus" "--rollout-num-gpus-per-engine" "topology.rolloutGpusPerEngine" "--lr" "recipe.lr" "--lr-decay-style" "recipe.lrDecayStyle" "--weight-decay" "recipe.weightDecay" "--save-interval" "recipe.saveInterval" "--num-rollout" "recipe.numRollout" "--global-batch-size" "recipe.globalBatchSize" "--rollout-batch-size" "recipe.rolloutBatchSize" "--sglang-expert-parallel-size" "recipe.sglangExpertParallel" "--sglang-moe-runner-backend" "recipe.sglangMoeRunnerBackend" "--max-tokens-per-gpu" "recipe.maxTokensPerGpu" "--use-dynamic-batch-size" "recipe.maxTokensPerGpu" "--save-retain-interval" "recipe.checkpoint.retainInterval" "--eval-interval" "recipe.evalInterval" "--eval-prompt-data" "data.evalData" "--recompute-granularity" "recipe.memory.recompute" "--optimizer-cpu-offload" "recipe.memory.optimizerCpuOffload" "--apply-chat-template" "data.applyChatTemplate" "--rollout-shuffle" "recipe.rolloutShuffle" "--balance-data" "recipe.balanceData" "--rm-url" "reward" "--wandb-project" "recipe.tracking.wandb.project" "--override-opt_param-scheduler" "recipe.checkpoint.resumeSchedule" "--use-checkpoint-opt_param-scheduler" "recipe.checkpoint.resumeSchedule" -}}
{{- $rendered := dict -}}
{{- range $f := concat $ownArgs (keys $flagValues) -}}
{{- with get $destOf (toString $f) -}}{{- if not (hasKey $rendered .) -}}{{- $_ := set $rendered . (toString $f) -}}{{- end -}}{{- end -}}
{{- end -}}
{{- range $i, $a := $r.extraArgs | default list -}}
{{- $arg := toString $a -}}
{{- if hasPrefix "-" $arg -}}
{{- $name := first (splitList "=" $arg) -}}
{{- $dest := get $destOf $name -}}
{{- /* a parser that takes abbreviations would read a unique prefix of a flag as that flag */ -}}
{{- if and (not $dest) $parser.allowAbbrev (hasPrefix "--" $name) -}}
{{- range $opt, $d := $destOf -}}{{- if and (not $dest) (hasPrefix $name $opt) (hasKey $rendered $d) -}}{{- $dest = $d -}}{{- end -}}{{- end -}}
{{- end -}}
{{- if and $dest (hasKey $rendered $dest) -}}
{{- $own := get $rendered $dest -}}
{{- $spelling := ternary "" (printf ", another spelling of %s" $own) (eq $name $own) -}}
{{- $shown := ternary (printf "%s=…" $name) $name (contains "=" $arg) -}}
{{- $e = append $e (printf "recipe.extraArgs[%d]: expected a flag the chart does not render, found %s%s (the chart writes it from %s: set that value instead; a repeated setting silently overrides the chart's topology and accounting)" $i $shown $spelling (get $flagValues $own | default "its values; see `miles-hooks plan`")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* the converter runs one process per GPU of one node (hooks.convert.nprocPerNode GPUs on the pod) */ -}}
{{- if $v.hooks.convert.enabled -}}
{{- if gt (int $v.hooks.convert.nprocPerNode) (int $t.gpusPerWorker) -}}
{{- $e = append $e (printf "hooks.convert.nprocPerNode: expected at most the GPUs of a node (topology.gpusPerWorker %d), found %d" (int $t.gpusPerWorker) (int $v.hooks.convert.nprocPerNode)) -}}
{{- end -}}
{{- /* a command of its own (torchrun ...) must start as many processes as the pod gets GPUs */ -}}
{{- $cmd := $v.hooks.convert.command -}}
{{- range $i, $c := $cmd -}}
{{- $arg := toString $c -}}
{{- if regexMatch "^--nproc[-_]per[-_]node(=|$)" $arg -}}
{{- $n := ternary (regexReplaceAll "^[^=]*=" $arg "") (toString (index $cmd (min (add1 $i) (sub (len $cmd) 1)))) (contains "=" $arg) -}}
{{- if ne $n (toString (int $v.hooks.convert.nprocPerNode)) -}}
{{- $e = append $e (printf "hooks.convert.command: expected %s %d to match hooks.convert.nprocPerNode (the pod gets that many GPUs), found %s %s" (regexReplaceAll "=.*" $arg "") (int $v.hooks.convert.nprocPerNode) (regexReplaceAll "=.*" $arg "") $n) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* the job driver's entrypoint resources must exist on a Ray node, or the job waits for ever */ -}}
{{- if ne $v.mode "singleNode" -}}
{{- $offered := dict "CPU" 1 "GPU" 1 "memory" 1 "gpu_node" 1 -}}
{{- with $v.rayCluster.head.rayStartParams.resources -}}
{{- range $k, $_ := (trimAll "'\"" (toString .) | replace "\\\"" "\"" | fromJson) }}{{ $_ := set $offered $k 1 }}{{ end -}}
{{- end -}}
{{- range $k := keys ($v.submit.entrypointResources | default dict) | sortAlpha -}}
{{- if not (hasKey $offered $k) -}}
{{- $e = append $e (printf "submit.entrypointResources.%s: expected a resource a Ray node offers (CPU, GPU, memory, gpu_node on the workers, or one in rayCluster.head.rayStartParams.resources), found %s: the job would wait for it for ever" $k $k) -}}
{{- else if and (eq $k "gpu_node") (gt (float64 (get $v.submit.entrypointResources $k)) 1.0) -}}
{{- $e = append $e (printf "submit.entrypointResources.gpu_node: expected at most 1 (each worker offers gpu_node: 1), found %v" (get $v.submit.entrypointResources $k)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Ray ports: the head's Service, the NetworkPolicy and the hooks use the ports the pods declare */ -}}
{{- range $g := list (list "rayCluster.head" $v.rayCluster.head.rayStartParams (dict "port" 6379 "dashboard-port" 8265 "ray-client-server-port" 10001 "metrics-export-port" 8080)) (list "rayCluster.workers" $v.rayCluster.workers.rayStartParams (dict "metrics-export-port" 8080)) -}}
{{- $fixed := index $g 2 -}}
{{- $taken := dict -}}
{{- range $k, $p := $fixed }}{{ $_ := set $taken (toString $p) $k }}{{ end -}}
{{- range $k := keys ((index $g 1) | default dict) | sortAlpha -}}
{{- $val := toString (get (index $g 1) $k) -}}
{{- if hasKey $fixed $k -}}
{{- if ne $val (toString (get $fixed $k)) -}}
{{- $e = append $e (printf "%s.rayStartParams.%s: expected unset or %d (the chart's Service, NetworkPolicy and hooks use that port), found %s" (index $g 0) $k (int (get $fixed $k)) $val) -}}
{{- end -}}
{{- else if and (hasSuffix "port" $k) (hasKey $taken $val) -}}
{{- $e = append $e (printf "%s.rayStartParams.%s: expected a port no other Ray component uses, found %s (Ray's %s)" (index $g 0) $k $val (get $taken $val)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* ray start parameters the chart sets itself (raycluster/_raycluster.tpl): the chart's value is rendered and the user's dropped, so a user's would be silently ignored */ -}}
{{- $cpuHead := eq (int $v.rayCluster.head.gpus) 0 -}}
{{- $headOwn := dict "dashboard-host" "to 0.0.0.0 (the head Service and the hooks reach the dashboard through it)" "num-gpus" "from rayCluster.head.gpus" -}}
{{- if $cpuHead }}{{ $_ := set $headOwn "num-cpus" "to 0 for a CPU head (rayCluster.head.gpus 0)" }}{{ end -}}
{{- $workerOwn := dict "num-gpus" "from topology.gpusPerWorker" "resources" "to {\"gpu_node\": 1}, which miles' placement and submit.entrypointResources count GPU nodes by" -}}
{{- range $g := list (list "head" $headOwn) (list "workers" $workerOwn) -}}
{{- $params := (index $v.rayCluster (index $g 0)).rayStartParams | default dict -}}
{{- range $k := keys (index $g 1) | sortAlpha -}}
{{- if hasKey $params $k -}}
{{- $e = append $e (printf "rayCluster.%s.rayStartParams.%s: expected unset, found %q: the chart sets it %s and would drop this value" (index $g 0) $k (toString (get $params $k)) (get (index $g 1) $k)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* hook events: a step runs where what it needs exists (the RayCluster exists only after install/upgrade; prepare-data and convert must finish before it starts). Helm hooks (helm.sh/hook, ordered by hook-weight) or Argo CD hooks (argocd.argoproj.io/hook, ordered by sync-wave), as the step's annotations say */ -}}
{{- if $v.hooks.enabled -}}
{{- $phases := list
  (list "preflight" "pre") (list "prepareData" "pre") (list "convert" "pre") (list "convertCheck" "pre")
  (list "waitReady" "post") (list "verify" "post") (list "submit" "post") -}}
{{- $allowed := dict "pre" (list "pre-install" "pre-upgrade") "post" (list "post-install" "post-upgrade" "post-rollback") -}}
{{- $argoAllowed := dict "pre" "PreSync" "post" "PostSync" -}}
{{- $why := dict "pre" "it prepares what the RayCluster needs before it starts" "post" "it needs the RayCluster, which exists only after install/upgrade/rollback" -}}
{{- range $ph := $phases -}}
{{- $key := index $ph 0 -}}
{{- $when := index $ph 1 -}}
{{- $step := get $v.hooks $key -}}
{{- $ann := $step.annotations | default dict -}}
{{- if and $step.enabled (hasKey $ann "helm.sh/hook") -}}
{{- range $ev := splitList "," (toString (get $ann "helm.sh/hook")) -}}
{{- if not (has (trim $ev) (get $allowed $when)) -}}
{{- $e = append $e (printf "hooks.%s.annotations.helm.sh/hook: expected events among %s (%s), found %q" $key (join ", " (get $allowed $when)) (get $why $when) (trim $ev)) -}}
{{- end -}}
{{- end -}}
{{- else if and $step.enabled (hasKey $ann "argocd.argoproj.io/hook") (ne (toString (get $ann "argocd.argoproj.io/hook")) (get $argoAllowed $when)) -}}
{{- $e = append $e (printf "hooks.%s.annotations.argocd.argoproj.io/hook: expected %s (%s), found %q" $key (get $argoAllowed $when) (get $why $when) (toString (get $ann "argocd.argoproj.io/hook"))) -}}
{{- end -}}
{{- end -}}
{{- range $pair := list (list "preflight" "prepareData") (list "prepareData" "convert") (list "preflight" "convert") (list "waitReady" "verify") (list "verify" "submit") (list "waitReady" "submit") -}}
{{- $a := get $v.hooks (index $pair 0) -}}
{{- $b := get $v.hooks (index $pair 1) -}}
{{- $aa := $a.annotations | default dict -}}
{{- $ba := $b.annotations | default dict -}}
{{- range $order := list "helm.sh/hook-weight" "argocd.argoproj.io/sync-wave" -}}
{{- if and $a.enabled $b.enabled (hasKey $aa $order) (hasKey $ba $order) -}}
{{- $wa := int (get $aa $order) -}}
{{- $wb := int (get $ba $order) -}}
{{- if ge $wa $wb -}}
{{- $e = append $e (printf "hooks.%s.annotations.%s: expected more than hooks.%s's (%d: %s runs after %s), found %d" (index $pair 1) $order (index $pair 0) $wa (index $pair 1) (index $pair 0) $wb) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not $v.hooks.rbac.create) $v.serviceAccount.create (or $v.hooks.preflight.enabled $v.hooks.prepareData.enabled $v.hooks.convert.enabled) -}}
{{- $e = append $e (printf "hooks.rbac.create: expected true, or serviceAccount.create false with serviceAccount.name an existing account, found false with serviceAccount.create true: the pre-install hook pods would run as %q, which Helm creates only after those hooks" (include "miles.serviceAccountName" .)) -}}
{{- end -}}
{{- end -}}
{{- /* an extra ingress peer that admits everyone undoes the policy silently: the API accepts it, and every Ray port (job submission included), the metrics ports or the reward service would answer any pod or address */ -}}
{{- if $v.networkPolicy.enabled -}}
{{- $reaches := dict "extraFrom" "the Ray pods and the reward service" "metricsFrom" "the Ray pods' metrics port and the reward service" "operatorFrom" "the Ray head's job submission API" -}}
{{- range $key := list "extraFrom" "metricsFrom" "operatorFrom" -}}
{{- $reach := get $reaches $key -}}
{{- range $i, $peer := index $v.networkPolicy $key | default list -}}
{{- $nsSel := $peer.namespaceSelector | default dict -}}
{{- $podSel := $peer.podSelector | default dict -}}
{{- $everyNamespace := and (hasKey $peer "namespaceSelector") (empty $nsSel.matchLabels) (empty $nsSel.matchExpressions) -}}
{{- $everyPod := and (empty $podSel.matchLabels) (empty $podSel.matchExpressions) -}}
{{- $cidr := toString (($peer.ipBlock | default dict).cidr | default "") -}}
{{- if and $everyNamespace $everyPod -}}
{{- $e = append $e (printf "networkPolicy.%s[%d]: expected a peer that names who may reach %s (a namespaceSelector or podSelector with matchLabels or matchExpressions), found %s, which admits every pod of every namespace; to go without the policy set networkPolicy.enabled=false" $key $i $reach (toJson $peer)) -}}
{{- else if regexMatch "/0+$" $cidr -}}
{{- $e = append $e (printf "networkPolicy.%s[%d].ipBlock.cidr: expected a range narrower than every address (a prefix length above 0), found %q, which admits any address to %s; to go without the policy set networkPolicy.enabled=false" $key $i $cidr $reach) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* credentials only by reference: a literal renders into the RayCluster, ConfigMaps or every hook pod, where `kubectl get -o yaml` and the Helm release show it (the hooks refuse the same names in the Ray runtime env) */ -}}
{{- $envLists := list (list "rayCluster.head.extraEnv" $v.rayCluster.head.extraEnv) (list "rayCluster.workers.extraEnv" $v.rayCluster.workers.extraEnv) (list "singleNode.extraEnv" $v.singleNode.extraEnv) (list "hooks.extraEnv" $v.hooks.extraEnv) -}}
{{- $literals := list -}}
{{- range $l := $envLists -}}
{{- range $i, $env := (index $l 1) -}}
{{- if and (kindIs "map" $env) (hasKey $env "value") -}}
{{- $literals = append $literals (list (printf "%s[%d] (%s)" (index $l 0) $i (toString $env.name)) (toString $env.name) (toString $env.value)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $val := $v.recipe.extraEnv -}}
{{- $literals = append $literals (list (printf "recipe.extraEnv.%s" $name) $name (toString $val)) -}}
{{- end -}}
{{- range $lit := $literals -}}
{{- if regexMatch $credentialName (index $lit 1) -}}
{{- $e = append $e (printf "%s: expected a credential-like name to take its value from a Secret (valueFrom.secretKeyRef in the *.extraEnv lists; secrets.extra for the Ray pods and the job), found a literal value (not shown); it would be readable in the rendered objects and the Helm release" (index $lit 0)) -}}
{{- else if regexMatch $credentialValue (index $lit 2) -}}
{{- $e = append $e (printf "%s: expected no secret in a plain value, found one that looks like a token or key (not shown); put it in a Secret and reference it (valueFrom.secretKeyRef, or secrets.extra)" (index $lit 0)) -}}
{{- end -}}
{{- end -}}
{{- /* what the extra lists would shadow. A second env entry of a name the chart sets silently replaces the
chart's (the API server keeps both, the container gets the last; in the Ray job's runtime env the job's wins
over the pod's); a second volume name or mount path is refused by the API server, for the Ray pods only when
KubeRay creates them, after the install. Computed from the containers and pods the chart renders, and only
for the lists that are set */ -}}
{{- if or $v.rayCluster.head.extraEnv $v.rayCluster.workers.extraEnv $v.singleNode.extraEnv $v.hooks.extraEnv $v.recipe.extraEnv -}}
{{- $owner := dict "NCCL_DEBUG" "gpuPods.nccl.debug" "NCCL_PROTO" "gpuPods.nccl.proto" "NCCL_SOCKET_IFNAME" "gpuPods.nccl.socketIfname" "NCCL_NVLS_ENABLE" "gpuPods.nccl.nvlsEnable" "FI_PROVIDER" "gpuPods.efa.count" "FI_EFA_USE_DEVICE_RDMA" "gpuPods.efa.count" "FI_EFA_FORK_SAFE" "gpuPods.efa.count" "RDMAV_FORK_SAFE" "gpuPods.efa.count" "RAY_AUTH_MODE" "secrets.rayAuth.enabled" "RAY_AUTH_TOKEN_PATH" "secrets.rayAuth.enabled" "NVIDIA_VISIBLE_DEVICES" "rayCluster.head.gpus" "MILES_HOOKS_LOG_FORMAT" "hooks.logFormat" "TENSORBOARD_DIR" "recipe.tracking.tensorboard" "MILES_RM_RETRY_SECONDS" "recipe.reward.retry.seconds" "MILES_SCRIPT_MODEL_NAME" "singleNode.modelName" "MILES_SCRIPT_EXTRA_ARGS" "recipe.extraArgs" -}}
{{- range (include "miles.secretRefs" . | fromJsonArray) -}}
{{- $_ := set $owner .env (ternary "secrets.extra" (printf "secrets.%s" .purpose) (eq .purpose "other")) -}}
{{- end -}}
{{- $podOwner := deepCopy $owner -}}
{{- range $name, $_ := $v.recipe.extraEnv }}{{ if not (hasKey $podOwner $name) }}{{ $_ := set $podOwner $name "recipe.extraEnv" }}{{ end }}{{ end -}}
{{- $shadowed := list -}}
{{- range $l := list (list "rayCluster.head.extraEnv" $v.rayCluster.head.extraEnv "miles.rayHeadContainer") (list "rayCluster.workers.extraEnv" $v.rayCluster.workers.extraEnv "miles.rayWorkerContainer") (list "singleNode.extraEnv" $v.singleNode.extraEnv "miles.singleNodeContainer") -}}
{{- if index $l 1 -}}
{{- $shadowed = append $shadowed (list (index $l 0) (index $l 1) (include (index $l 2) $ | fromYaml).env) -}}
{{- end -}}
{{- end -}}
{{- with $v.hooks.extraEnv -}}
{{- $shadowed = append $shadowed (list "hooks.extraEnv" . (include "miles.hookEnv" (dict "context" $ "hf" true "ray" true) | fromYamlArray)) -}}
{{- end -}}
{{- range $sh := $shadowed -}}
{{- $extra := index $sh 1 -}}
{{- $all := index $sh 2 -}}
{{- $own := dict -}}
{{- range $x := slice $all 0 (sub (len $all) (len $extra) | int) }}{{ $_ := set $own (toString $x.name) true }}{{ end -}}
{{- $seen := dict -}}
{{- range $i, $x := $extra -}}
{{- $name := toString $x.name -}}
{{- $at := printf "%s[%d] (%s)" (index $sh 0) $i $name -}}
{{- if hasKey $own $name -}}
{{- $e = append $e (printf "%s: expected a name the chart does not set, found %s, which it sets itself%s; a second entry silently replaces the chart's value" $at $name (ternary (printf " from %s: set that instead" (get $podOwner $name)) "" (hasKey $podOwner $name))) -}}
{{- else if hasKey $seen $name -}}
{{- $e = append $e (printf "%s: expected each name once, found it again (entry %d); the container gets only the last" $at (get $seen $name)) -}}
{{- end -}}
{{- $_ := set $seen $name $i -}}
{{- end -}}
{{- end -}}
{{- with $v.recipe.extraEnv -}}
{{- /* the job's runtime env: what the chart puts there and in the pods' env, which the job's processes inherit */ -}}
{{- $bareValues := deepCopy $v -}}
{{- $_ := set $bareValues.recipe "extraEnv" dict -}}
{{- $bare := dict "Values" $bareValues "Release" $.Release "Chart" $.Chart "Capabilities" $.Capabilities "Files" $.Files "Template" $.Template -}}
{{- $own := include "miles.runtimeEnv" $bare | fromJson -}}
{{- range (include "miles.gpuEnv" $bare | fromYamlArray) }}{{ $_ := set $own (toString .name) true }}{{ end -}}
{{- range $name := keys . | sortAlpha -}}
{{- if hasKey $own $name -}}
{{- $e = append $e (printf "recipe.extraEnv.%s: expected a name the chart does not set, found %s, which it sets itself%s; the job's value would silently replace the chart's" $name $name (ternary (printf " from %s: set that instead" (get $owner $name)) "" (hasKey $owner $name))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (ne $v.mode "singleNode") (or $v.rayCluster.head.extraVolumes $v.rayCluster.head.extraVolumeMounts $v.rayCluster.workers.extraVolumes $v.rayCluster.workers.extraVolumeMounts) -}}
{{- $spec := include "miles.rayClusterSpec" . | fromYaml -}}
{{- range $g := list (list "head" $spec.headGroupSpec.template.spec) (list "workers" (index $spec.workerGroupSpecs 0).template.spec) -}}
{{- $group := index $v.rayCluster (index $g 0) -}}
{{- $pod := index $g 1 -}}
{{- range $kind := list (list "extraVolumes" $pod.volumes "name" "volume") (list "extraVolumeMounts" (index $pod.containers 0).volumeMounts "mountPath" "mount path") -}}
{{- $extra := index $group (index $kind 0) | default list -}}
{{- if $extra -}}
{{- $all := index $kind 1 -}}
{{- $key := index $kind 2 -}}
{{- $own := dict -}}
{{- range $x := slice $all 0 (sub (len $all) (len $extra) | int) }}{{ $_ := set $own (toString (get $x $key)) true }}{{ end -}}
{{- $seen := dict -}}
{{- range $i, $x := $extra -}}
{{- $name := toString (get $x $key) -}}
{{- $at := printf "rayCluster.%s.%s[%d].%s" (index $g 0) (index $kind 0) $i $key -}}
{{- if hasKey $own $name -}}
{{- $e = append $e (printf "%s: expected a %s the chart does not use in this pod, found %q, which it uses itself (the shared volume, /dev/shm, the Ray token or the run spec); the API server would refuse the pod when KubeRay creates it" $at (index $kind 3) $name) -}}
{{- else if hasKey $seen $name -}}
{{- $e = append $e (printf "%s: expected each %s once, found %q again (entry %d); the API server would refuse the pod" $at (index $kind 3) $name (get $seen $name)) -}}
{{- end -}}
{{- $_ := set $seen $name $i -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* the same for command lines, which the Ray job's entrypoint, the run spec, the pods and the release show: upstream's credential flags (miles --wandb-key; SGLang's --api-key, --admin-api-key, --ssl-keyfile-password, passed as --sglang-*), and anything shaped like a token (the walk below) */ -}}
{{- range $cmd := list (list "recipe.extraArgs" $v.recipe.extraArgs) (list "hooks.convert.command" $v.hooks.convert.command) -}}
{{- range $i, $a := (index $cmd 1) | default list -}}
{{- if regexMatch $credentialFlag (toString $a) -}}
{{- $e = append $e (printf "%s[%d]: expected no credential on a command line (the run spec, the pods and the Helm release show it), found %s and its value (not shown); W&B takes its key from secrets.wandb, anything else from an environment variable in secrets.extra" (index $cmd 0) $i (index (splitList "=" (toString $a)) 0)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* ray start parameters render into the RayCluster's pod commands: Ray's own --redis-password and the like */ -}}
{{- range $group := list "head" "workers" -}}
{{- range $k := keys ((index $v.rayCluster $group).rayStartParams | default dict) | sortAlpha -}}
{{- if regexMatch "(?i)(password|passwd|passphrase|token|secret|api-key)" $k -}}
{{- $e = append $e (printf "rayCluster.%s.rayStartParams.%s: expected no credential in a ray start parameter (the RayCluster's pod command shows it), found one (not shown); GCS's Redis password comes from rayCluster.gcsFaultTolerance.redisPasswordSecret" $group $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* and anywhere else in the values: a string shaped like a token, a key or a URL with a password renders somewhere readable (the env lists above say it with the entry's name) */ -}}
{{- /* every template includes this, and one regexp of every shape over all the values costs a tenth of a second
each time: the walk runs only where one shape, whose literal start is there, matches the values' JSON (escaping
cannot hide a match; a false alarm only costs the walk) */ -}}
{{- $json := toJson $v -}}
{{- $shaped := false -}}
{{- range $credentialShapes -}}
{{- if and (contains (index . 0) $json) (regexMatch (index . 1) $json) }}{{ $shaped = true }}{{ end -}}
{{- end -}}
{{- if $shaped -}}
{{- $skip := list "rayCluster.head.extraEnv" "rayCluster.workers.extraEnv" "singleNode.extraEnv" "hooks.extraEnv" "recipe.extraEnv" -}}
{{- range $path := include "miles.secretShapedPaths" (dict "value" $v "path" "" "pattern" $credentialValue "skip" $skip) | fromJsonArray -}}
{{- $e = append $e (printf "%s: expected no secret in a plain value, found one that looks like a token, a key or a URL with a password (not shown); put it in a Secret and reference it (secrets.extra for the Ray pods and the job, valueFrom.secretKeyRef in the *.extraEnv lists)" $path) -}}
{{- end -}}
{{- end -}}
{{- if $e -}}
{{- fail (printf "\n\nmiles: %d invalid value(s):\n  - %s\n" (len $e) (join "\n  - " $e)) -}}
{{- end -}}
{{- end -}}

{{/*
miles.quantityBytes: a Kubernetes quantity -> its value as a float string, in every form resource.ParseQuantity
takes ("8Gi", "500m", "100n", "1.5", ".5", "5.", "+2", "1e3", "1E3"; "1E" is an exa), and numbers (YAML's 0.5,
or 68719476736, which Helm holds as a float and prints as "6.8719476736e+10"); "-1" when it cannot be parsed
(the validation reports it).
*/}}
{{- define "miles.quantityBytes" -}}
{{- $q := toString . -}}
{{- $m := regexFind "^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $q -}}
{{- $suffix := trimPrefix $m $q -}}
{{- $mult := dict "" 1.0 "n" 1e-9 "u" 1e-6 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if and $m (hasKey $mult $suffix) -}}
{{- mulf (float64 $m) (get $mult $suffix) -}}
{{- else if and $m (regexMatch "^[eE][-+]?[0-9]+$" $suffix) -}}
{{- float64 $q -}}
{{- else -}}
-1
{{- end -}}
{{- end -}}

{{/* miles.quantityText: a quantity as the user wrote it; a whole number that Helm holds as a float (68719476736)
printed whole, not as 6.8719476736e+10. */}}
{{- define "miles.quantityText" -}}
{{- if and (kindIs "float64" .) (lt (float64 .) 9e18) (eq (float64 (int64 .)) (float64 .)) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* miles.humanBytes: a byte count -> "1.9 TiB" / "56.0 GiB", for messages. */}}
{{- define "miles.humanBytes" -}}
{{- $b := float64 . -}}
{{- if ge $b 1099511627776.0 -}}
{{- printf "%.1f TiB" (divf $b 1099511627776.0) -}}
{{- else -}}
{{- printf "%.1f GiB" (divf $b 1073741824.0) -}}
{{- end -}}
{{- end -}}

{{/*
miles.secretShapedPaths: JSON list of the paths of the strings under .value that match .pattern, walking
maps and lists; the paths in .skip are not entered. (dict "value" any "path" "" "pattern" regex "skip" list)
*/}}
{{- define "miles.secretShapedPaths" -}}
{{- $out := list -}}
{{- if has .path .skip -}}
{{- else if kindIs "map" .value -}}
{{- range $k := keys .value | sortAlpha -}}
{{- $sub := ternary $k (printf "%s.%s" $.path $k) (eq $.path "") -}}
{{- $out = concat $out (include "miles.secretShapedPaths" (dict "value" (get $.value $k) "path" $sub "pattern" $.pattern "skip" $.skip) | fromJsonArray) -}}
{{- end -}}
{{- else if kindIs "slice" .value -}}
{{- range $i, $x := .value -}}
{{- $out = concat $out (include "miles.secretShapedPaths" (dict "value" $x "path" (printf "%s[%d]" $.path $i) "pattern" $.pattern "skip" $.skip) | fromJsonArray) -}}
{{- end -}}
{{- else if and (kindIs "string" .value) (regexMatch .pattern .value) -}}
{{- $out = append $out .path -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
