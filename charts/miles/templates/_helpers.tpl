{{/*
Names, labels, images and paths shared by every template.
*/}}

{{/* miles.name: the chart name (or nameOverride), DNS-1035, ≤ 53 characters. */}}
{{- define "miles.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 53 | trimSuffix "-" -}}
{{- end -}}

{{/*
miles.fullname: prefix of every object the chart creates. ≤ 53 characters (room for KubeRay's
"-head-svc"-style suffixes is checked by the validation of rayCluster.name), DNS-1035.
*/}}
{{- define "miles.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* miles.componentName: (dict "context" $ "component" "x") -> <fullname>-x, ≤ 63 characters. */}}
{{- define "miles.componentName" -}}
{{- printf "%s-%s" (include "miles.fullname" .context) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "miles.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* miles.selectorLabels: labels that select the release's pods. */}}
{{- define "miles.selectorLabels" -}}
app.kubernetes.io/name: {{ include "miles.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* miles.labels: common labels of every object. */}}
{{- define "miles.labels" -}}
helm.sh/chart: {{ include "miles.chart" . }}
{{ include "miles.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: miles
{{- end -}}

{{/* miles.componentSelectorLabels: (dict "context" $ "component" "x") */}}
{{- define "miles.componentSelectorLabels" -}}
{{ include "miles.selectorLabels" .context }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* miles.componentLabels: (dict "context" $ "component" "x") */}}
{{- define "miles.componentLabels" -}}
{{ include "miles.labels" .context }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* miles.kueueLabels: Kueue's queue and priority labels of the workload object (RayCluster or Job). */}}
{{- define "miles.kueueLabels" -}}
{{- $labels := dict -}}
{{- with .Values.scheduling.kueueQueue }}{{ $_ := set $labels "kueue.x-k8s.io/queue-name" . }}{{ end -}}
{{- with .Values.scheduling.kueuePriorityClass }}{{ $_ := set $labels "kueue.x-k8s.io/priority-class" . }}{{ end -}}
{{- with $labels }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* miles.imageRef: (dict "image" .Values.image "default" appVersion) -> repo@digest or repo:tag */}}
{{- define "miles.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .default .image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{- define "miles.image" -}}
{{- include "miles.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion) -}}
{{- end -}}

{{- define "miles.hooksImage" -}}
{{- include "miles.imageRef" (dict "image" .Values.hooks.image "default" .Chart.AppVersion) -}}
{{- end -}}

{{- define "miles.rewardImage" -}}
{{- include "miles.imageRef" (dict "image" .Values.reward.image "default" .Chart.AppVersion) -}}
{{- end -}}

{{/* miles.rollingTag: "true" when the miles image uses a rolling tag and no digest (upstream's CI
moves latest/dev and deletes all but the newest 20 dev-<timestamp> tags). */}}
{{- define "miles.rollingTag" -}}
{{- $tag := toString .Values.image.tag -}}
{{- if and (not .Values.image.digest) (or (has $tag (list "latest" "dev" "nightly" "main" "")) (hasPrefix "dev-" $tag)) -}}true{{- end -}}
{{- end -}}

{{/* miles.path: (dict "context" $ "path" p) -> p when absolute, else <mountPath>/p */}}
{{- define "miles.path" -}}
{{- if hasPrefix "/" .path -}}
{{- .path -}}
{{- else -}}
{{- printf "%s/%s" (trimSuffix "/" .context.Values.storage.mountPath) .path -}}
{{- end -}}
{{- end -}}

{{- define "miles.hfPath" -}}
{{- $default := printf "models/%s" (last (splitList "/" .Values.model.repoId)) -}}
{{- include "miles.path" (dict "context" . "path" (default $default .Values.model.hfPath)) -}}
{{- end -}}

{{- define "miles.torchDistPath" -}}
{{- if .Values.model.torchDistPath -}}
{{- include "miles.path" (dict "context" . "path" .Values.model.torchDistPath) -}}
{{- else -}}
{{- printf "%s_torch_dist" (include "miles.hfPath" .) -}}
{{- end -}}
{{- end -}}

{{- define "miles.promptData" -}}
{{- include "miles.path" (dict "context" . "path" (default "data/dapo-math-17k/dapo-math-17k.jsonl" .Values.data.promptData)) -}}
{{- end -}}

{{/* miles.outputDir: per-release run directory (separate releases never share a checkpoint dir). */}}
{{- define "miles.outputDir" -}}
{{- include "miles.path" (dict "context" . "path" (default (printf "runs/%s/%s" .Release.Namespace .Release.Name) .Values.output.dir)) -}}
{{- end -}}

{{/* miles.claimName: the PVC every pod mounts. */}}
{{- define "miles.claimName" -}}
{{- if eq .Values.storage.type "existingClaim" -}}
{{- .Values.storage.existingClaim -}}
{{- else -}}
{{- include "miles.componentName" (dict "context" . "component" "fsx") -}}
{{- end -}}
{{- end -}}

{{/* miles.clusterScopedName: <namespace>-<fullname>-<suffix> for cluster-scoped objects (PV, StorageClass, ClusterRole). */}}
{{- define "miles.clusterScopedName" -}}
{{- printf "%s-%s-%s" .context.Release.Namespace (include "miles.fullname" .context) .suffix | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* miles.submitterServiceAccountName: the RayJob submitter's account (rayJob.submitter.serviceAccountName, or <fullname>-submitter, which the chart creates). */}}
{{- define "miles.submitterServiceAccountName" -}}
{{- default (include "miles.componentName" (dict "context" . "component" "submitter")) .Values.rayJob.submitter.serviceAccountName -}}
{{- end -}}

{{- define "miles.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "miles.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "miles.hooksServiceAccountName" -}}
{{- if .Values.hooks.rbac.create -}}
{{- include "miles.componentName" (dict "context" . "component" "hooks") -}}
{{- else -}}
{{- include "miles.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{/* miles.rewardUrl: in-cluster URL of the chart's reward service, or recipe.reward.url. */}}
{{- define "miles.rewardUrl" -}}
{{- if .Values.reward.enabled -}}
{{- printf "http://%s.%s.svc:8080/score" (include "miles.componentName" (dict "context" . "component" "reward")) .Release.Namespace -}}
{{- else -}}
{{- .Values.recipe.reward.url -}}
{{- end -}}
{{- end -}}

{{- define "miles.rewardType" -}}
{{- if .Values.reward.enabled -}}remote_rm{{- else -}}{{ .Values.recipe.reward.type }}{{- end -}}
{{- end -}}

{{/*
miles.rewardClient: "true" when miles scores through the chart's retrying remote_rm client
(files/k8s_remote_rm.py, mounted into the miles pods): miles' built-in remote_rm posts once and fails
the run on the first refused connection or 503 (miles/rollout/rm_hub/__init__.py).
*/}}
{{- define "miles.rewardClient" -}}
{{- if and (eq (include "miles.rewardType" .) "remote_rm") .Values.recipe.reward.retry.enabled -}}true{{- end -}}
{{- end -}}

{{/*
miles.podLabels: (dict "context" $ "component" "x" "extra" map) -> labels of a pod template. Only
stable labels (no chart version): a chart upgrade alone must not change the Ray pod templates.
*/}}
{{- define "miles.podLabels" -}}
{{- $labels := merge (dict) (default (dict) .extra) .context.Values.scheduling.podLabels -}}
{{ include "miles.componentSelectorLabels" . }}
app.kubernetes.io/part-of: miles
{{- range $k, $v := $labels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* miles.notesRayToken: NOTES' lines that give the ray CLI the Ray token (the dashboard refuses it without). */}}
{{- define "miles.notesRayToken" }}
{{- if .Values.secrets.rayAuth.enabled }}
{{- $secret := default (include "miles.componentName" (dict "context" . "component" "ray-auth")) .Values.secrets.rayAuth.existingSecret }}
  # the dashboard answers only with the Ray token (secrets.rayAuth); for the ray CLI (Ray >= 2.52):
  kubectl -n {{ .Release.Namespace }} get secret {{ $secret }} -o jsonpath='{.data.{{ include "miles.rayAuthKey" . }}}' | base64 -d > ray-token
  RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$PWD/ray-token ray job list --address http://127.0.0.1:8265
{{- end }}
{{- end }}
