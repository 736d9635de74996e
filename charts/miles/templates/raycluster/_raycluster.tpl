{{/*
miles.rayClusterSpec: the RayCluster's spec: a CPU head (rayCluster.head) and one GPU worker group
(rayCluster.workers, plus the gpuPods settings it shares with the single-node pod), each pod built by
miles.podTemplate (_pod.tpl) around the container below it.
Its hash names the cluster with upgradeStrategy nameHash (miles.rayClusterName).
*/}}
{{- define "miles.rayClusterSpec" -}}
{{- $v := .Values -}}
{{- $rc := $v.rayCluster -}}
{{- $t := include "miles.topology" . | fromJson -}}
{{- $pools := include "miles.pools" . | fromJson -}}
{{- $headGpus := int $rc.head.gpus -}}
rayVersion: {{ $rc.rayVersion | quote }}
enableInTreeAutoscaling: false
{{- if eq (include "miles.upgradeMethod" .) "crd" }}
upgradeStrategy:
  type: Recreate
{{- end }}
{{- if include "miles.rayAuthOptions" . }}
{{- /* KubeRay's own record of the token: its dashboard client (a RayJob's job polling) reads this Secret's
key auth_token; the pods' env already names it, so KubeRay adds none */}}
authOptions:
  mode: token
  secretName: {{ (include "miles.rayTokenRef" . | fromJson).name }}
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
    {{- /* the comment below renders into the hashed spec, so it stays as earlier versions wrote it; miles.validate now refuses a parameter the chart sets */}}
    # rayCluster.head.rayStartParams may add parameters; the chart's win
    dashboard-host: "0.0.0.0"
    {{- if eq $headGpus 0 }}
    num-cpus: "0"
    num-gpus: "0"
    {{- else }}
    num-gpus: {{ $headGpus | toString | quote }}
    {{- end }}
    {{- range $k, $val := $rc.head.rayStartParams }}
    {{ $k }}: {{ $val | toString | quote }}
    {{- end }}
  template:
    {{- include "miles.podTemplate" (dict "context" . "component" "ray-head" "pod" (dict
      "container" (include "miles.rayHeadContainer" .)
      "labels" $rc.head.labels
      "annotations" $rc.head.annotations
      "serviceAccountName" (include "miles.serviceAccountName" .)
      "automountToken" $v.serviceAccount.automountToken
      "podSecurityContext" $v.gpuPods.podSecurityContext
      "nodeSelector" $pools.head.nodeSelector
      "tolerations" $pools.head.tolerations
      "affinity" $rc.head.affinity
      "scheduling" true
      "storage" true
      "shmSize" $rc.head.shmSize
      "milesPlugins" true
      "volumes" $rc.head.extraVolumes
      "volumeMounts" $rc.head.extraVolumeMounts)) | nindent 4 }}
workerGroupSpecs:
  - groupName: {{ $rc.workers.groupName }}
    replicas: {{ $t.workerReplicas }}
    minReplicas: {{ $t.workerReplicas }}
    maxReplicas: {{ $t.workerReplicas }}
    rayStartParams:
      {{- /* as for the head: the comment stays byte for byte */}}
      # rayCluster.workers.rayStartParams may add parameters; the chart's win
      num-gpus: {{ $t.gpusPerWorker | toString | quote }}
      resources: '"{\"gpu_node\": 1}"'
      {{- range $k, $val := $rc.workers.rayStartParams }}
      {{ $k }}: {{ $val | toString | quote }}
      {{- end }}
    template:
      {{- include "miles.podTemplate" (dict "context" . "component" "ray-worker" "pod" (dict
        "container" (include "miles.rayWorkerContainer" .)
        "labels" $rc.workers.labels
        "annotations" $v.gpuPods.annotations
        "serviceAccountName" (include "miles.serviceAccountName" .)
        "automountToken" $v.serviceAccount.automountToken
        "podSecurityContext" $v.gpuPods.podSecurityContext
        "nodeSelector" $pools.worker.nodeSelector
        "tolerations" $pools.worker.tolerations
        "affinity" (include "miles.rayWorkerAffinity" . | fromYaml)
        "scheduling" true
        "storage" true
        "shmSize" $v.gpuPods.shmSize
        "restartPolicy" "Never"
        "milesPlugins" true
        "volumes" $rc.workers.extraVolumes
        "volumeMounts" $rc.workers.extraVolumeMounts)) | nindent 6 }}
{{- end -}}

{{/* miles.rayHeadContainer: the Ray head; a CPU head (rayCluster.head.gpus 0) hides the node's GPUs. */}}
{{- define "miles.rayHeadContainer" -}}
{{- $head := .Values.rayCluster.head -}}
name: ray-head
image: {{ include "miles.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
command: [/bin/bash, -c, --]
args:
  - {{ include "miles.rayStartCommand" . | quote }}
env:
  {{- include "miles.podEnv" . | nindent 2 }}
  {{- if eq (int $head.gpus) 0 }}
  - name: NVIDIA_VISIBLE_DEVICES
    value: void
  {{- end }}
  {{- include "miles.secretEnv" (dict "context" .) | nindent 2 }}
  {{- with $head.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  - name: gcs
    containerPort: 6379
  - name: dashboard
    containerPort: 8265
  - name: client
    containerPort: 10001
  - name: metrics
    containerPort: 8080
resources:
  {{- include "miles.gpuResources" (dict "context" . "base" $head.resources "gpus" (int $head.gpus) "efa" false) | nindent 2 }}
securityContext:
  {{- toYaml .Values.gpuPods.securityContext | nindent 2 }}
{{- end -}}

{{/* miles.rayWorkerContainer: a GPU worker: all topology.gpusPerWorker GPUs of its node, and its EFA devices. */}}
{{- define "miles.rayWorkerContainer" -}}
{{- $workers := .Values.rayCluster.workers -}}
name: ray-worker
image: {{ include "miles.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
command: [/bin/bash, -c, --]
args:
  - {{ include "miles.rayStartCommand" . | quote }}
env:
  {{- include "miles.gpuEnv" . | nindent 2 }}
  {{- with $workers.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  - name: metrics
    containerPort: 8080
resources:
  {{- include "miles.gpuResources" (dict "context" . "base" $workers.resources "gpus" (int .Values.topology.gpusPerWorker) "efa" true) | nindent 2 }}
securityContext:
  {{- toYaml .Values.gpuPods.securityContext | nindent 2 }}
{{- end -}}

{{/* miles.rayWorkerAffinity: gpuPods.affinity plus a required anti-affinity: one worker per node. */}}
{{- define "miles.rayWorkerAffinity" -}}
{{- $affinity := default (dict) .Values.gpuPods.affinity -}}
{{- $anti := default (dict) $affinity.podAntiAffinity -}}
{{- with omit $affinity "podAntiAffinity" }}
{{- toYaml . }}
{{- end }}
podAntiAffinity:
  {{- with omit $anti "requiredDuringSchedulingIgnoredDuringExecution" }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  requiredDuringSchedulingIgnoredDuringExecution:
    {{- with $anti.requiredDuringSchedulingIgnoredDuringExecution }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    - labelSelector:
        matchLabels:
          {{- include "miles.componentSelectorLabels" (dict "context" . "component" "ray-worker") | nindent 10 }}
      topologyKey: kubernetes.io/hostname
{{- end -}}

{{/*
miles.rayStartCommand: the Ray containers' shell command: raise the open-files limit for raylet, then
exec the `ray start` command KubeRay generates (KUBERAY_GEN_RAY_START_CMD; the RayCluster carries
ray.io/overwrite-container-cmd: "true" so KubeRay does not replace our command). If the limit cannot
be raised the container exits with a message instead of starting a raylet that dies at 1024 files.
*/}}
{{- define "miles.rayStartCommand" -}}
{{- $n := int .Values.rayCluster.workers.openFilesLimit -}}
ulimit -n {{ $n }} || { echo "miles: cannot raise the open-files limit to {{ $n }} (hard limit $(ulimit -Hn)); lower rayCluster.workers.openFilesLimit" >&2; exit 1; }; echo "miles: open-files limit $(ulimit -n)"; eval "exec ${KUBERAY_GEN_RAY_START_CMD}"
{{- end -}}

{{/*
miles.upgradeMethod: how a Recreate upgrade is done: rayCluster.upgradeStrategy.method, or where it is
empty `crd` for rayCluster.operatorVersion 1.6 or newer (the KubeRay release that added
spec.upgradeStrategy) and `nameHash` below it; empty for type None and in mode rayJob. An operatorVersion that is not a
version counts as below 1.6 here: miles.validate names it.
*/}}
{{- define "miles.upgradeMethod" -}}
{{- $us := .Values.rayCluster.upgradeStrategy -}}
{{- /* a RayJob's cluster is replaced with its RayJob (miles.rayJobName); KubeRay refuses upgradeStrategy there */ -}}
{{- if and (eq .Values.mode "rayCluster") (eq $us.type "Recreate") -}}
{{- if $us.method -}}
{{- $us.method -}}
{{- else if include "miles.kuberayHas16" . -}}
crd
{{- else -}}
nameHash
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
miles.rayClusterName: the RayCluster's name. With upgradeStrategy Recreate/nameHash it ends in 8 hex
of a hash of the spec, so a changed pod template is a new cluster. The hash is taken over the spec in
the layout earlier chart versions hashed (miles.rayClusterHashText), so that a chart upgrade that
renders the same cluster keeps its name.
*/}}
{{- define "miles.rayClusterName" -}}
{{- $base := default (include "miles.fullname" .) .Values.rayCluster.name -}}
{{- if and (eq .Values.mode "rayCluster") (eq (include "miles.upgradeMethod" .) "nameHash") -}}
{{- printf "%s-%s" ($base | trunc 44 | trimSuffix "-") (include "miles.rayClusterHashText" (include "miles.rayClusterSpec" . | fromYaml) | sha256sum | trunc 8) -}}
{{- else -}}
{{- $base | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* miles.rayClusterHashText: a parsed RayCluster spec -> the text its name hash is taken over. */}}
{{- define "miles.rayClusterHashText" -}}
{{- $head := .headGroupSpec -}}
{{- $w := index .workerGroupSpecs 0 -}}
rayVersion: {{ .rayVersion | quote }}
enableInTreeAutoscaling: false
{{- if .upgradeStrategy }}
upgradeStrategy:
  type: Recreate
{{- end }}
{{- with .gcsFaultToleranceOptions }}
gcsFaultToleranceOptions:
  redisAddress: {{ .redisAddress | quote }}
  {{- with .redisPassword }}
  redisPassword:
    valueFrom:
      secretKeyRef:
        name: {{ .valueFrom.secretKeyRef.name }}
        key: {{ .valueFrom.secretKeyRef.key }}
  {{- end }}
{{- end }}
headGroupSpec:
  serviceType: ClusterIP
  rayStartParams:
    {{- range $k, $val := $head.rayStartParams }}
    {{ $k }}: {{ $val | toString | quote }}
    {{- end }}
  template:
    {{- include "miles.podTemplateHashText" $head.template | nindent 4 }}
workerGroupSpecs:
  - groupName: {{ $w.groupName }}
    replicas: {{ int $w.replicas }}
    minReplicas: {{ int $w.minReplicas }}
    maxReplicas: {{ int $w.maxReplicas }}
    rayStartParams:
      {{- range $k, $val := $w.rayStartParams }}
      {{ $k }}: {{ $val | toString | quote }}
      {{- end }}
    template:
      {{- include "miles.podTemplateHashText" $w.template | nindent 6 }}
{{- end -}}

{{/*
miles.rayJobName: the RayJob's name (mode rayJob): rayCluster.name or the full name, then 8 hex of a hash of the
run's identity (miles.runId) and the cluster's spec. KubeRay does not act on a changed RayJob, so a changed run or
a changed cluster is a new RayJob; its job keeps the run's submission id (miles.submissionId), so the same run on a
new cluster resumes under the same id. At most 47 characters (KubeRay appends 6 to name the cluster it creates).
*/}}
{{- define "miles.rayJobName" -}}
{{- $base := default (include "miles.fullname" .) .Values.rayCluster.name -}}
{{- printf "%s-%s" ($base | trunc 38 | trimSuffix "-") (list (include "miles.runId" .) (include "miles.rayClusterSpec" .) | toJson | sha256sum | trunc 8) -}}
{{- end -}}
