{{/*
miles.podTemplate: the ONE pod-template builder used by the Ray head, the Ray worker group, the
single-node Job, the hook Jobs, the helm test pod and the reward Deployment.

Input: (dict "context" $ "component" "head" "pod" (dict ...)) where pod may hold:
  labels, annotations            extra pod labels / annotations (maps)
  serviceAccountName, automountToken
  podSecurityContext             map
  nodeSelector, tolerations, affinity, topologySpreadConstraints
  scheduling                     true: apply scheduling.priorityClassName / schedulerName
  restartPolicy, terminationGracePeriodSeconds
  storage                        true: mount the shared claim at storage.mountPath
  shmSize                        non-empty: memory-backed /dev/shm of that size
  tmp                            true: an emptyDir at /tmp (read-only root filesystems)
  runSpec                        name of a ConfigMap mounted read-only at /etc/miles
  milesPlugins                   true: the chart's miles plugins (the retrying reward client) inside
                                 /root/miles/miles_plugins, when the run uses them
  volumes                        extra volumes (list)
  initContainers                 list of container maps (already complete)
  container                      the main container map: name, image, imagePullPolicy, command, args,
                                 env, ports, resources, securityContext, probes..., volumeMounts (extra)
Output: a PodTemplateSpec (metadata + spec) as YAML.
*/}}
{{- define "miles.podTemplate" -}}
{{- $ctx := .context -}}
{{- $p := .pod -}}
{{- $v := $ctx.Values -}}
{{- $volumes := list -}}
{{- $mounts := list -}}
{{- if $p.storage -}}
{{- $volumes = append $volumes (dict "name" "shared" "persistentVolumeClaim" (dict "claimName" (include "miles.claimName" $ctx))) -}}
{{- $mounts = append $mounts (dict "name" "shared" "mountPath" $v.storage.mountPath) -}}
{{- end -}}
{{- if $p.shmSize -}}
{{- $volumes = append $volumes (dict "name" "dshm" "emptyDir" (dict "medium" "Memory" "sizeLimit" $p.shmSize)) -}}
{{- $mounts = append $mounts (dict "name" "dshm" "mountPath" "/dev/shm") -}}
{{- end -}}
{{- if $p.tmp -}}
{{- $volumes = append $volumes (dict "name" "tmp" "emptyDir" (dict "sizeLimit" "1Gi")) -}}
{{- $mounts = append $mounts (dict "name" "tmp" "mountPath" "/tmp") -}}
{{- end -}}
{{- if $p.runSpec -}}
{{- $volumes = append $volumes (dict "name" "run-spec" "configMap" (dict "name" $p.runSpec)) -}}
{{- $mounts = append $mounts (dict "name" "run-spec" "mountPath" "/etc/miles" "readOnly" true) -}}
{{- end -}}
{{- $annotations := merge (dict) (default (dict) $p.annotations) $v.scheduling.podAnnotations -}}
{{- if and $p.milesPlugins (include "miles.rewardClient" $ctx) -}}
{{- $volumes = append $volumes (dict "name" "miles-plugins" "configMap" (dict "name" (include "miles.componentName" (dict "context" $ctx "component" "plugins")))) -}}
{{- $mounts = append $mounts (dict "name" "miles-plugins" "mountPath" "/root/miles/miles_plugins/k8s_remote_rm.py" "subPath" "k8s_remote_rm.py" "readOnly" true) -}}
{{- /* a subPath mount never sees a ConfigMap update: a new client is a new pod template */ -}}
{{- $annotations = merge $annotations (dict "miles.radixark.io/plugins-sha256" ($ctx.Files.Get "files/k8s_remote_rm.py" | sha256sum)) -}}
{{- end -}}
{{- $volumes = concat $volumes (default (list) $p.volumes) -}}
{{- $container := deepCopy $p.container -}}
{{- $_ := set $container "volumeMounts" (concat $mounts (default (list) $p.container.volumeMounts)) -}}
{{- if not $container.volumeMounts -}}{{- $_ := unset $container "volumeMounts" -}}{{- end -}}
{{- $spec := dict "containers" (list $container) -}}
{{- if $volumes -}}{{- $_ := set $spec "volumes" $volumes -}}{{- end -}}
{{- if $p.initContainers -}}{{- $_ := set $spec "initContainers" $p.initContainers -}}{{- end -}}
{{- if $p.serviceAccountName -}}{{- $_ := set $spec "serviceAccountName" $p.serviceAccountName -}}{{- end -}}
{{- $_ := set $spec "automountServiceAccountToken" (default false $p.automountToken) -}}
{{- if $p.podSecurityContext -}}{{- $_ := set $spec "securityContext" $p.podSecurityContext -}}{{- end -}}
{{- if $v.imagePullSecrets -}}
{{- $secrets := list -}}
{{- range $v.imagePullSecrets -}}{{- $secrets = append $secrets (dict "name" .) -}}{{- end -}}
{{- $_ := set $spec "imagePullSecrets" $secrets -}}
{{- end -}}
{{- if $p.nodeSelector -}}{{- $_ := set $spec "nodeSelector" $p.nodeSelector -}}{{- end -}}
{{- if $p.tolerations -}}{{- $_ := set $spec "tolerations" $p.tolerations -}}{{- end -}}
{{- if $p.affinity -}}{{- $_ := set $spec "affinity" $p.affinity -}}{{- end -}}
{{- if $p.topologySpreadConstraints -}}{{- $_ := set $spec "topologySpreadConstraints" $p.topologySpreadConstraints -}}{{- end -}}
{{- if $p.restartPolicy -}}{{- $_ := set $spec "restartPolicy" $p.restartPolicy -}}{{- end -}}
{{- if $p.terminationGracePeriodSeconds -}}{{- $_ := set $spec "terminationGracePeriodSeconds" $p.terminationGracePeriodSeconds -}}{{- end -}}
{{- if $p.scheduling -}}
{{- with $v.scheduling.priorityClassName -}}{{- $_ := set $spec "priorityClassName" . -}}{{- end -}}
{{- with $v.scheduling.schedulerName -}}{{- $_ := set $spec "schedulerName" . -}}{{- end -}}
{{- end -}}
metadata:
  labels:
    {{- include "miles.podLabels" (dict "context" $ctx "component" .component "extra" $p.labels) | nindent 4 }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- toYaml $spec | nindent 2 }}
{{- end -}}

{{/* miles.secretEnv: env entries (secretKeyRef) for every referenced Secret; (dict "context" $ "purposes" (list "huggingface" ...)) */}}
{{- define "miles.secretEnv" -}}
{{- $env := list -}}
{{- range (include "miles.secretRefs" .context | fromJsonArray) -}}
{{- if or (not $.purposes) (has .purpose $.purposes) -}}
{{- $env = append $env (dict "name" .env "valueFrom" (dict "secretKeyRef" (dict "name" .name "key" .key "optional" (not .required)))) -}}
{{- end -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* miles.secretRefs: JSON list of {purpose,name,key,env,required} for every Secret the release references. */}}
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
{{- toJson $refs -}}
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
  "NCCL_NVLS_ENABLE" (toString $v.rayCluster.workers.nccl.nvlsEnable)
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

{{/* miles.podEnv: env list of every Ray / single-node container: the runtime env plus pod-only settings. */}}
{{- define "miles.podEnv" -}}
{{- $env := list -}}
{{- range $k, $val := (include "miles.runtimeEnv" . | fromJson) -}}
{{- $env = append $env (dict "name" $k "value" $val) -}}
{{- end -}}
{{- toJson (append $env (dict "name" "TOKENIZERS_PARALLELISM" "value" "false")) -}}
{{- end -}}

{{/* miles.gpuEnv: env list of GPU pods (Ray workers, single node): pod env + NCCL/EFA + secrets. */}}
{{- define "miles.gpuEnv" -}}
{{- $v := .Values -}}
{{- $env := include "miles.podEnv" . | fromJsonArray -}}
{{- $nccl := $v.rayCluster.workers.nccl -}}
{{- $env = concat $env (list (dict "name" "NCCL_DEBUG" "value" $nccl.debug) (dict "name" "NCCL_PROTO" "value" $nccl.proto) (dict "name" "NCCL_SOCKET_IFNAME" "value" $nccl.socketIfname)) -}}
{{- if gt (int $v.rayCluster.workers.efa.count) 0 -}}
{{- $env = concat $env (list (dict "name" "FI_PROVIDER" "value" "efa") (dict "name" "FI_EFA_USE_DEVICE_RDMA" "value" "1") (dict "name" "FI_EFA_FORK_SAFE" "value" "1") (dict "name" "RDMAV_FORK_SAFE" "value" "1")) -}}
{{- end -}}
{{- $env = concat $env (include "miles.secretEnv" (dict "context" .) | fromJsonArray) -}}
{{- toJson $env -}}
{{- end -}}

{{/* miles.gpuResources: (dict "context" $ "base" resources "gpus" n "efa" bool) -> resources with GPU (and EFA) requests = limits. */}}
{{- define "miles.gpuResources" -}}
{{- $v := .context.Values -}}
{{- $res := deepCopy (default (dict) .base) -}}
{{- $req := default (dict) $res.requests -}}
{{- $lim := default (dict) $res.limits -}}
{{- if gt (int .gpus) 0 -}}
{{- $_ := set $req $v.rayCluster.workers.gpuResource (toString .gpus) -}}
{{- $_ := set $lim $v.rayCluster.workers.gpuResource (toString .gpus) -}}
{{- end -}}
{{- if and .efa (gt (int $v.rayCluster.workers.efa.count) 0) -}}
{{- $_ := set $req $v.rayCluster.workers.efa.resourceName (toString $v.rayCluster.workers.efa.count) -}}
{{- $_ := set $lim $v.rayCluster.workers.efa.resourceName (toString $v.rayCluster.workers.efa.count) -}}
{{- end -}}
{{- toJson (dict "requests" $req "limits" $lim) -}}
{{- end -}}

{{/* miles.pools: JSON {head|worker|reward|hooks: {nodeSelector, tolerations}} after presets. */}}
{{- define "miles.pools" -}}
{{- $v := .Values -}}
{{- $headSel := deepCopy $v.rayCluster.head.nodeSelector -}}
{{- $workerSel := deepCopy $v.rayCluster.workers.nodeSelector -}}
{{- $rewardSel := deepCopy $v.reward.nodeSelector -}}
{{- $headTol := $v.rayCluster.head.tolerations -}}
{{- $workerTol := $v.rayCluster.workers.tolerations -}}
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
{{- toJson (dict
  "head" (dict "nodeSelector" $headSel "tolerations" $headTol)
  "worker" (dict "nodeSelector" $workerSel "tolerations" $workerTol)
  "reward" (dict "nodeSelector" $rewardSel "tolerations" $rewardTol)
  "hooks" (dict "nodeSelector" $hooksSel "tolerations" $hooksTol)) -}}
{{- end -}}
