{{/*
miles.rayStartCommand: container args that really raise the open-files limit for raylet, then exec
the `ray start` command KubeRay generates (KUBERAY_GEN_RAY_START_CMD; the RayCluster carries
ray.io/overwrite-container-cmd: "true" so KubeRay does not replace our command). If the limit cannot
be raised the container exits with a message instead of starting a raylet that dies at 1024 files.
*/}}
{{- define "miles.rayStartCommand" -}}
{{- $n := int .Values.rayCluster.workers.openFilesLimit -}}
{{- printf "ulimit -n %d || { echo \"miles: cannot raise the open-files limit to %d (hard limit $(ulimit -Hn)); lower rayCluster.workers.openFilesLimit\" >&2; exit 1; }; echo \"miles: open-files limit $(ulimit -n)\"; eval \"exec ${KUBERAY_GEN_RAY_START_CMD}\"" $n $n -}}
{{- end -}}

{{/* miles.rayClusterSpec: spec of the RayCluster (YAML). Its hash names the cluster with upgradeStrategy nameHash. */}}
{{- define "miles.rayClusterSpec" -}}
{{- $v := .Values -}}
{{- $rc := $v.rayCluster -}}
{{- $t := include "miles.topology" . | fromJson -}}
{{- $pools := include "miles.pools" . | fromJson -}}
{{- $cmd := list "/bin/bash" "-c" "--" -}}
{{- $args := list (include "miles.rayStartCommand" .) -}}
{{- /* head */ -}}
{{- $headGpus := int $rc.head.gpus -}}
{{- $headEnv := include "miles.podEnv" . | fromJsonArray -}}
{{- if eq $headGpus 0 -}}
{{- $headEnv = append $headEnv (dict "name" "NVIDIA_VISIBLE_DEVICES" "value" "void") -}}
{{- end -}}
{{- $headEnv = concat $headEnv (include "miles.secretEnv" (dict "context" .) | fromJsonArray) $rc.head.extraEnv -}}
{{- $headRes := include "miles.gpuResources" (dict "context" . "base" $rc.head.resources "gpus" $headGpus "efa" false) | fromJson -}}
{{- $headContainer := dict
  "name" "ray-head"
  "image" (include "miles.image" .)
  "imagePullPolicy" $v.image.pullPolicy
  "command" $cmd
  "args" $args
  "env" $headEnv
  "ports" (list (dict "name" "gcs" "containerPort" 6379) (dict "name" "dashboard" "containerPort" 8265) (dict "name" "client" "containerPort" 10001) (dict "name" "metrics" "containerPort" 8080))
  "resources" $headRes
  "securityContext" $v.gpuSecurityContext
  "volumeMounts" $rc.head.extraVolumeMounts
-}}
{{- $headPod := dict
  "labels" $rc.head.labels
  "annotations" $rc.head.annotations
  "serviceAccountName" (include "miles.serviceAccountName" .)
  "automountToken" $v.serviceAccount.automountToken
  "podSecurityContext" $v.gpuPodSecurityContext
  "nodeSelector" $pools.head.nodeSelector
  "tolerations" $pools.head.tolerations
  "affinity" $rc.head.affinity
  "scheduling" true
  "storage" true
  "shmSize" $rc.head.shmSize
  "milesPlugins" true
  "volumes" $rc.head.extraVolumes
  "container" $headContainer
-}}
{{- $headParams := dict "dashboard-host" "0.0.0.0" -}}
{{- if eq $headGpus 0 -}}
{{- $_ := set $headParams "num-cpus" "0" -}}
{{- $_ := set $headParams "num-gpus" "0" -}}
{{- else -}}
{{- $_ := set $headParams "num-gpus" (toString $headGpus) -}}
{{- end -}}
{{- $headParams = merge (dict) $headParams $rc.head.rayStartParams -}}
{{- /* workers */ -}}
{{- $wEnv := concat (include "miles.gpuEnv" . | fromJsonArray) $rc.workers.extraEnv -}}
{{- $wRes := include "miles.gpuResources" (dict "context" . "base" $rc.workers.resources "gpus" $t.gpusPerWorker "efa" true) | fromJson -}}
{{- $wContainer := dict
  "name" "ray-worker"
  "image" (include "miles.image" .)
  "imagePullPolicy" $v.image.pullPolicy
  "command" $cmd
  "args" $args
  "env" $wEnv
  "ports" (list (dict "name" "metrics" "containerPort" 8080))
  "resources" $wRes
  "securityContext" $v.gpuSecurityContext
  "volumeMounts" $rc.workers.extraVolumeMounts
-}}
{{- $anti := dict "labelSelector" (dict "matchLabels" (include "miles.componentSelectorLabels" (dict "context" . "component" "ray-worker") | fromYaml)) "topologyKey" "kubernetes.io/hostname" -}}
{{- $affinity := deepCopy (default (dict) $rc.workers.affinity) -}}
{{- $podAnti := deepCopy (default (dict) $affinity.podAntiAffinity) -}}
{{- $_ := set $podAnti "requiredDuringSchedulingIgnoredDuringExecution" (append (default (list) $podAnti.requiredDuringSchedulingIgnoredDuringExecution) $anti) -}}
{{- $_ := set $affinity "podAntiAffinity" $podAnti -}}
{{- $wPod := dict
  "labels" $rc.workers.labels
  "annotations" $rc.workers.annotations
  "serviceAccountName" (include "miles.serviceAccountName" .)
  "automountToken" $v.serviceAccount.automountToken
  "podSecurityContext" $v.gpuPodSecurityContext
  "nodeSelector" $pools.worker.nodeSelector
  "tolerations" $pools.worker.tolerations
  "affinity" $affinity
  "scheduling" true
  "storage" true
  "shmSize" $rc.workers.shmSize
  "restartPolicy" "Never"
  "milesPlugins" true
  "volumes" $rc.workers.extraVolumes
  "container" $wContainer
-}}
{{- $wParams := merge (dict "num-gpus" (toString $t.gpusPerWorker) "resources" "\"{\\\"gpu_node\\\": 1}\"") $rc.workers.rayStartParams -}}
rayVersion: {{ $rc.rayVersion | quote }}
enableInTreeAutoscaling: false
{{- if and (eq $rc.upgradeStrategy.type "Recreate") (eq $rc.upgradeStrategy.method "crd") }}
upgradeStrategy:
  type: Recreate
{{- end }}
{{- if $rc.gcsFaultTolerance.enabled }}
gcsFaultToleranceOptions:
  redisAddress: {{ $rc.gcsFaultTolerance.redisAddress | quote }}
  {{- with $rc.gcsFaultTolerance.redisPasswordSecret }}
  redisPassword:
    valueFrom:
      secretKeyRef:
        name: {{ . }}
        key: {{ $rc.gcsFaultTolerance.redisPasswordKey }}
  {{- end }}
{{- end }}
headGroupSpec:
  serviceType: ClusterIP
  rayStartParams:
    {{- range $k, $val := $headParams }}
    {{ $k }}: {{ $val | toString | quote }}
    {{- end }}
  template:
    {{- include "miles.podTemplate" (dict "context" . "component" "ray-head" "pod" $headPod) | nindent 4 }}
workerGroupSpecs:
  - groupName: {{ $rc.workers.groupName }}
    replicas: {{ $t.workerReplicas }}
    minReplicas: {{ $t.workerReplicas }}
    maxReplicas: {{ $t.workerReplicas }}
    rayStartParams:
      {{- range $k, $val := $wParams }}
      {{ $k }}: {{ $val | toString | quote }}
      {{- end }}
    template:
      {{- include "miles.podTemplate" (dict "context" . "component" "ray-worker" "pod" $wPod) | nindent 6 }}
{{- end -}}

{{/* miles.rayClusterName: RayCluster name; with Recreate/nameHash it ends in a hash of the cluster spec. */}}
{{- define "miles.rayClusterName" -}}
{{- $base := default (include "miles.fullname" .) .Values.rayCluster.name -}}
{{- $us := .Values.rayCluster.upgradeStrategy -}}
{{- if and (eq .Values.mode "rayCluster") (eq $us.type "Recreate") (eq $us.method "nameHash") -}}
{{- printf "%s-%s" ($base | trunc 44 | trimSuffix "-") (include "miles.rayClusterSpec" . | sha256sum | trunc 8) -}}
{{- else -}}
{{- $base | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
