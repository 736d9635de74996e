{{/*
miles.singleNodePodTemplate: the single-node pod: all GPUs of one node, the upstream launcher with a
local Ray, configured through MILES_SCRIPT_* env. Built by miles.podTemplate (_pod.tpl).
*/}}
{{- define "miles.singleNodePodTemplate" -}}
{{- $v := .Values -}}
{{- $pools := include "miles.pools" . | fromJson -}}
{{- include "miles.podTemplate" (dict "context" . "component" "single-node" "pod" (dict
  "container" (include "miles.singleNodeContainer" .)
  "annotations" $v.gpuPods.annotations
  "serviceAccountName" (include "miles.serviceAccountName" .)
  "automountToken" $v.serviceAccount.automountToken
  "podSecurityContext" $v.gpuPods.podSecurityContext
  "nodeSelector" $pools.worker.nodeSelector
  "tolerations" $pools.worker.tolerations
  "affinity" $v.gpuPods.affinity
  "scheduling" true
  "storage" true
  "shmSize" $v.gpuPods.shmSize
  "milesPlugins" true
  "restartPolicy" "Never")) }}
{{- end -}}

{{- define "miles.singleNodeContainer" -}}
{{- $v := .Values -}}
{{- $gpus := int $v.topology.gpusPerWorker -}}
{{- $n := int $v.singleNode.openFilesLimit -}}
{{- $extraArgs := list -}}
{{- range (include "miles.trainArgs" . | fromJsonArray) }}{{ $extraArgs = append $extraArgs (squote .) }}{{ end -}}
name: miles
image: {{ include "miles.image" . }}
imagePullPolicy: {{ $v.image.pullPolicy }}
workingDir: /root/miles
command: [/bin/bash, -c, --]
args:
  - {{ printf "ulimit -n %d || { echo \"miles: cannot raise the open-files limit to %d (hard limit $(ulimit -Hn))\" >&2; exit 1; }; exec python3 %s" $n $n $v.singleNode.launcher | quote }}
env:
  {{- include "miles.gpuEnv" . | nindent 2 }}
  - name: MILES_SCRIPT_MODEL_NAME
    value: {{ $v.singleNode.modelName | quote }}
  - name: MILES_SCRIPT_NUM_NODES
    value: "1"
  - name: MILES_SCRIPT_NUM_GPUS_PER_NODE
    value: {{ $gpus | toString | quote }}
  - name: MILES_SCRIPT_MODEL_DIR
    value: {{ include "miles.hfPath" . | dir | quote }}
  - name: MILES_SCRIPT_DATA_DIR
    value: {{ include "miles.promptData" . | dir | dir | quote }}
  - name: MILES_SCRIPT_OUTPUT_DIR
    value: {{ include "miles.outputDir" . | quote }}
  - name: MILES_SCRIPT_RUN_ID
    value: {{ .Release.Name | quote }}
  - name: MILES_SCRIPT_EXTRA_ARGS
    value: {{ join " " $extraArgs | quote }}
  {{- with $v.singleNode.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
resources:
  {{- include "miles.gpuResources" (dict "context" . "base" $v.singleNode.resources "gpus" $gpus "efa" true) | nindent 2 }}
securityContext:
  {{- toYaml $v.gpuPods.securityContext | nindent 2 }}
{{- end -}}

{{/* miles.singleNodeJobName: <fullname>-train-<hash of the pod template and backoffLimit>. */}}
{{- define "miles.singleNodeJobName" -}}
{{- $pod := include "miles.podTemplateHashText" (include "miles.singleNodePodTemplate" . | fromYaml) -}}
{{- $hash := printf "%s%v" $pod .Values.singleNode.backoffLimit | sha256sum | trunc 8 -}}
{{- printf "%s-%s" (include "miles.componentName" (dict "context" . "component" "train") | trunc 54 | trimSuffix "-") $hash -}}
{{- end -}}
