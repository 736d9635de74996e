{{/*
miles.singleNodePod: the single-node pod description (JSON) for miles.podTemplate: all GPUs of one
node, the upstream launcher with a local Ray, configured through MILES_SCRIPT_* env.
*/}}
{{- define "miles.singleNodePod" -}}
{{- $v := .Values -}}
{{- $t := include "miles.topology" . | fromJson -}}
{{- $pools := include "miles.pools" . | fromJson -}}
{{- $quoted := list -}}
{{- range (include "miles.trainArgs" . | fromJsonArray) -}}{{- $quoted = append $quoted (squote .) -}}{{- end -}}
{{- $env := concat (include "miles.gpuEnv" . | fromJsonArray) (list
  (dict "name" "MILES_SCRIPT_MODEL_NAME" "value" $v.singleNode.modelName)
  (dict "name" "MILES_SCRIPT_NUM_NODES" "value" "1")
  (dict "name" "MILES_SCRIPT_NUM_GPUS_PER_NODE" "value" (toString $t.gpusPerWorker))
  (dict "name" "MILES_SCRIPT_MODEL_DIR" "value" (include "miles.hfPath" . | dir))
  (dict "name" "MILES_SCRIPT_DATA_DIR" "value" (include "miles.promptData" . | dir | dir))
  (dict "name" "MILES_SCRIPT_OUTPUT_DIR" "value" (include "miles.outputDir" .))
  (dict "name" "MILES_SCRIPT_RUN_ID" "value" .Release.Name)
  (dict "name" "MILES_SCRIPT_EXTRA_ARGS" "value" (join " " $quoted))) $v.singleNode.extraEnv -}}
{{- $n := int $v.rayCluster.workers.openFilesLimit -}}
{{- $container := dict
  "name" "miles"
  "image" (include "miles.image" .)
  "imagePullPolicy" $v.image.pullPolicy
  "workingDir" "/root/miles"
  "command" (list "/bin/bash" "-c" "--")
  "args" (list (printf "ulimit -n %d || { echo \"miles: cannot raise the open-files limit to %d (hard limit $(ulimit -Hn))\" >&2; exit 1; }; exec python3 %s" $n $n $v.singleNode.launcher))
  "env" $env
  "resources" (include "miles.gpuResources" (dict "context" . "base" $v.singleNode.resources "gpus" $t.gpusPerWorker "efa" true) | fromJson)
  "securityContext" $v.gpuSecurityContext
-}}
{{- $pod := dict
  "annotations" $v.rayCluster.workers.annotations
  "serviceAccountName" (include "miles.serviceAccountName" .)
  "automountToken" $v.serviceAccount.automountToken
  "podSecurityContext" $v.gpuPodSecurityContext
  "nodeSelector" $pools.worker.nodeSelector
  "tolerations" $pools.worker.tolerations
  "affinity" $v.rayCluster.workers.affinity
  "scheduling" true
  "storage" true
  "shmSize" $v.rayCluster.workers.shmSize
  "milesPlugins" true
  "restartPolicy" "Never"
  "container" $container
-}}
{{- toJson $pod -}}
{{- end -}}

{{/* miles.singleNodeJobName: <fullname>-train-<hash of the Job spec> (a Job's template is immutable). */}}
{{- define "miles.singleNodeJobName" -}}
{{- $pod := include "miles.singleNodePod" . | fromJson -}}
{{- $hash := printf "%s%v" (include "miles.podTemplate" (dict "context" . "component" "single-node" "pod" $pod)) .Values.singleNode.backoffLimit | sha256sum | trunc 8 -}}
{{- printf "%s-%s" (include "miles.componentName" (dict "context" . "component" "train") | trunc 54 | trimSuffix "-") $hash -}}
{{- end -}}
