{{/*
miles.hookSteps: JSON list of the hook steps this release renders, in the order of docs/hooks.md "Sequence".
Each: key (values key), step (CLI subcommand), name (Job suffix, default step), runSpec (ConfigMap the
pod mounts). convert (pre-install) runs in the miles image with GPUs; convertCheck (pre-upgrade) runs
the same step in the hooks image on CPU, because the running RayCluster holds the GPUs during an upgrade.
Post-install/post-upgrade steps run only in rayCluster mode; convert only for the megatron backend;
cleanup (pre-delete) in every mode.
*/}}
{{- define "miles.hookSteps" -}}
{{- $v := .Values -}}
{{- $pre := include "miles.componentName" (dict "context" . "component" "run-hook") -}}
{{- $post := include "miles.componentName" (dict "context" . "component" "run") -}}
{{- $steps := list -}}
{{- if $v.hooks.enabled -}}
{{- if $v.hooks.preflight.enabled -}}{{- $steps = append $steps (dict "key" "preflight" "step" "preflight" "runSpec" $pre) -}}{{- end -}}
{{- if $v.hooks.prepareData.enabled -}}{{- $steps = append $steps (dict "key" "prepareData" "step" "prepare-data" "runSpec" $pre) -}}{{- end -}}
{{- if $v.hooks.convert.enabled -}}{{- $steps = append $steps (dict "key" "convert" "step" "convert" "name" "convert" "runSpec" $pre) -}}{{- end -}}
{{- /* The CPU check stands alone too: with convert off (e.g. Argo CD after the first sync) it validates the published checkpoint. */ -}}
{{- if and $v.hooks.convertCheck.enabled (not (include "miles.installPending" .)) -}}{{- $steps = append $steps (dict "key" "convertCheck" "step" "convert" "name" "convert-check" "runSpec" $pre) -}}{{- end -}}
{{- if eq $v.mode "rayCluster" -}}
{{- if $v.hooks.waitReady.enabled -}}{{- $steps = append $steps (dict "key" "waitReady" "step" "wait-ready" "runSpec" $post) -}}{{- end -}}
{{- if $v.hooks.verify.enabled -}}{{- $steps = append $steps (dict "key" "verify" "step" "verify" "runSpec" $post) -}}{{- end -}}
{{- if $v.hooks.submit.enabled -}}{{- $steps = append $steps (dict "key" "submit" "step" "submit" "runSpec" $post) -}}{{- end -}}
{{- end -}}
{{- if $v.hooks.cleanup.enabled -}}{{- $steps = append $steps (dict "key" "cleanup" "step" "cleanup" "runSpec" $pre) -}}{{- end -}}
{{- end -}}
{{- toJson $steps -}}
{{- end -}}

{{/*
miles.installPending: "true" on an upgrade of a release whose objects were never created (its run spec
ConfigMap is absent): the first install failed in its pre-install hooks, and this upgrade (`helm upgrade
--install`, Flux, helmfile) retries it. Helm runs the pre-upgrade hooks then, so the steps that run on
install only (the GPU convert) are made to run now as well, and the check that assumes a running
RayCluster (convertCheck) is left out. Without cluster access (`helm template`, a client-side dry run)
`lookup` finds nothing and an upgrade renders as this retry.
*/}}
{{- define "miles.installPending" -}}
{{- if .Release.IsUpgrade -}}
{{- $spec := include "miles.componentName" (dict "context" . "component" "run") -}}
{{- if not (lookup "v1" "ConfigMap" .Release.Namespace $spec) }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* miles.hookAnnotations: a hook Job's annotations (dict "context" $ "step" dict): the step's values, and for the GPU convert on an upgrade that retries a failed install (miles.installPending), pre-upgrade added to its Helm events. */}}
{{- define "miles.hookAnnotations" -}}
{{- $ann := deepCopy ((get .context.Values.hooks .step.key).annotations | default dict) -}}
{{- $events := toString (get $ann "helm.sh/hook") -}}
{{- if and (eq .step.key "convert") (hasKey $ann "helm.sh/hook") (not (contains "pre-upgrade" $events)) (include "miles.installPending" .context) -}}
{{- $_ := set $ann "helm.sh/hook" (printf "%s,pre-upgrade" $events) -}}
{{- end -}}
{{- toYaml $ann -}}
{{- end -}}

{{/* miles.hookCallsRay: "true" for the hook steps (values keys; `submitter` is the RayJob's submitter pod) that call the Ray Jobs API and so get the Ray token. */}}
{{- define "miles.hookCallsRay" -}}
{{- if has . (list "verify" "submit" "submitter" "test") }}true{{ end -}}
{{- end -}}

{{/*
miles.hookEnv: env of a hooks-image container. (dict "context" $ "hf" bool "ray" bool): hf adds the
Hugging Face token, ray the Ray token (secrets.rayAuth, a file: miles.hookPod mounts it) for the steps
that call the Ray Jobs API.
*/}}
{{- define "miles.hookEnv" -}}
{{- $v := .context.Values -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: MILES_HOOKS_LOG_FORMAT
  value: {{ $v.hooks.logFormat | quote }}
{{- if .hf }}
{{- include "miles.secretEnv" (dict "context" .context "purposes" (list "huggingface")) }}
{{- end }}
{{- if and .ray .context.Values.secrets.rayAuth.enabled }}
{{- include "miles.rayAuthMode" .context }}
- name: RAY_AUTH_TOKEN_PATH
  value: {{ include "miles.rayTokenDir" .context }}/token
{{- end }}
{{- with $v.hooks.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
miles.hookPod: pod template of a hook Job or a test pod. (dict "context" $ "step" dict) with a step of
miles.hookSteps. Hooks-image pods follow the restricted Pod Security Standard and only the steps that
call the Kubernetes API get a token. The convert pod runs the miles image (root, GPUs) with an init
container copying miles_hooks from the hooks image (docs/CONTRACTS.md).
*/}}
{{- define "miles.hookPod" -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $s := .step -}}
{{- $pools := include "miles.pools" $ctx | fromJson -}}
{{- /* the RayJob's submitter pod and the export pods outlive the hook phases, and with them the hooks' own
account: the submitter has its own, an export pod the Ray pods' (it calls no API) */ -}}
{{- $account := include "miles.hooksServiceAccountName" $ctx -}}
{{- if eq $s.key "submitter" }}{{ $account = include "miles.submitterServiceAccountName" $ctx }}{{ end -}}
{{- if eq $s.key "export" }}{{ $account = include "miles.serviceAccountName" $ctx }}{{ end -}}
{{- $pod := dict
  "serviceAccountName" $account
  "automountToken" (or (has $s.key (list "preflight" "waitReady" "test" "cleanup")) (and (eq $s.key "prepareData") (include "miles.imageFacts" $ctx)) (and (eq $s.key "submitter") (include "miles.exportOnRunEnd" $ctx)))
  "restartPolicy" "Never"
  "runSpec" $s.runSpec
  "tmp" true
-}}
{{- if has $s.key (list "convert" "export") -}}
{{- /* the miles image (upstream's converter or exporter) with miles_hooks copied in */ -}}
{{- $pool := get $pools $s.key -}}
{{- $_ := merge $pod (dict
  "initContainers" (include "miles.hookCopyContainer" $ctx)
  "container" (ternary (include "miles.hookConvertContainer" $ctx) (include "miles.hookExportContainer" $ctx) (eq $s.key "convert"))
  "volumes" (list (dict "name" "miles-hooks" "emptyDir" (dict "sizeLimit" "256Mi")))
  "volumeMounts" (list (dict "name" "miles-hooks" "mountPath" "/miles-hooks" "readOnly" true))
  "storage" true
  "annotations" (get $v.hooks $s.key).podAnnotations
  "podSecurityContext" $v.gpuPods.podSecurityContext
  "nodeSelector" $pool.nodeSelector
  "tolerations" $pool.tolerations
  "scheduling" true) -}}
{{- if eq $s.key "convert" }}{{ $_ := set $pod "shmSize" $v.hooks.convert.shmSize }}{{ end -}}
{{- else -}}
{{- $_ := merge $pod (dict
  "container" (include "miles.hookContainer" (dict "context" $ctx "step" $s))
  "rayToken" (ternary (include "miles.rayTokenRef" $ctx | fromJson) dict (eq (include "miles.hookCallsRay" $s.key) "true"))
  "podSecurityContext" $v.hooks.podSecurityContext
  "nodeSelector" $pools.hooks.nodeSelector
  "tolerations" $pools.hooks.tolerations
  "storage" (has $s.key (list "prepareData" "convertCheck" "submit" "submitter" "test" "testReport"))) -}}
{{- if eq $s.key "prepareData" }}{{ $_ := set $pod "annotations" $v.hooks.prepareData.podAnnotations }}{{ end -}}
{{- if eq $s.key "submitter" }}{{ $_ := set $pod "annotations" $v.rayJob.submitter.podAnnotations }}{{ end -}}
{{- end -}}
{{- include "miles.podTemplate" (dict "context" $ctx "component" (printf "hook-%s" (default $s.step $s.name)) "pod" $pod) -}}
{{- end -}}

{{/* miles.hookContainer: a hooks-image step: `miles-hooks <step> --spec /etc/miles/run.json`. (dict "context" $ "step" dict) */}}
{{- define "miles.hookContainer" -}}
{{- $v := .context.Values -}}
{{- $s := .step -}}
name: {{ default $s.step $s.name }}
image: {{ include "miles.hooksImage" .context }}
imagePullPolicy: {{ $v.hooks.image.pullPolicy }}
command:
  - miles-hooks
  - {{ $s.step }}
  - --spec
  - /etc/miles/run.json
  - --log-format
  - {{ $v.hooks.logFormat }}
  {{- if eq $s.key "test" }}
  - --kube
  - auto
  {{- end }}
  {{- if eq $s.key "convertCheck" }}
  - --check-only
  {{- end }}
  {{- if eq $s.key "cleanup" }}
  - --timeout
  - {{ sub $v.hooks.cleanup.activeDeadlineSeconds 60 | toString | quote }}
  {{- end }}
  {{- if eq $s.key "submitter" }}
  - --verify-timeout
  - {{ $v.rayJob.submitter.verifyTimeoutSeconds | toString | quote }}
  {{- end }}
  {{- if eq $s.key "testReport" }}
  - --fail-on
  - {{ $v.hooks.test.reportFailOn | quote }}
  - --timeout
  - {{ $v.hooks.test.reportTimeoutSeconds | toString | quote }}
  {{- end }}
env:
  {{- include "miles.hookEnv" (dict "context" .context "hf" (eq $s.key "prepareData") "ray" (include "miles.hookCallsRay" $s.key)) | nindent 2 }}
resources:
  {{- $ownResources := and (eq $s.key "prepareData") (not (empty $v.hooks.prepareData.resources)) }}
  {{- toYaml (ternary $v.hooks.prepareData.resources $v.hooks.resources $ownResources) | nindent 2 }}
securityContext:
  {{- toYaml $v.hooks.securityContext | nindent 2 }}
{{- end -}}

{{/* miles.hookCopyContainer: the convert pod's init container: miles_hooks from the hooks image into an emptyDir. */}}
{{- define "miles.hookCopyContainer" -}}
- name: copy-miles-hooks
  image: {{ include "miles.hooksImage" . }}
  imagePullPolicy: {{ .Values.hooks.image.pullPolicy }}
  command: [cp, -r, /opt/miles-hooks/pkg/., /miles-hooks/]
  resources:
    {{- toYaml .Values.hooks.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.hooks.securityContext | nindent 4 }}
  volumeMounts:
    - name: miles-hooks
      mountPath: /miles-hooks
{{- end -}}

{{/* miles.hookConvertContainer: the convert step in the miles image with hooks.convert.nprocPerNode GPUs. */}}
{{- define "miles.hookConvertContainer" -}}
{{- $v := .Values -}}
name: convert
image: {{ include "miles.image" . }}
imagePullPolicy: {{ $v.image.pullPolicy }}
command:
  - python3
  - -m
  - miles_hooks
  - convert
  - --spec
  - /etc/miles/run.json
  - --log-format
  - {{ $v.hooks.logFormat }}
  - --timeout
  {{- /* 120 s under the Job's deadline, so the converter exits with a message first */}}
  - {{ sub (int $v.hooks.convert.activeDeadlineSeconds) 120 | toString | quote }}
env:
  {{- include "miles.hookEnv" (dict "context" . "hf" false "ray" false) | nindent 2 }}
  - name: PYTHONPATH
    value: /miles-hooks
resources:
  {{- include "miles.gpuResources" (dict "context" . "base" $v.hooks.convert.resources "gpus" (int $v.hooks.convert.nprocPerNode) "efa" false) | nindent 2 }}
securityContext:
  {{- toYaml $v.gpuPods.securityContext | nindent 2 }}
{{- end -}}

{{/* miles.hookExportContainer: the export step in the miles image, on CPU; MILES_HOOKS_EXPORT_ITERATION (empty: the newest) is set on a Job made from the template to export another iteration. */}}
{{- define "miles.hookExportContainer" -}}
{{- $v := .Values -}}
name: export
image: {{ include "miles.image" . }}
imagePullPolicy: {{ $v.image.pullPolicy }}
command:
  - python3
  - -m
  - miles_hooks
  - export
  - --spec
  - /etc/miles/run.json
  - --log-format
  - {{ $v.hooks.logFormat }}
  - --timeout
  {{- /* 120 s under the Job's deadline, so the exporter exits with a message first */}}
  - {{ sub (int $v.hooks.export.activeDeadlineSeconds) 120 | toString | quote }}
env:
  {{- include "miles.hookEnv" (dict "context" . "hf" false "ray" false) | nindent 2 }}
  - name: PYTHONPATH
    value: /miles-hooks
  - name: MILES_HOOKS_EXPORT_ITERATION
    value: ""
resources:
  {{- include "miles.exportResources" . | nindent 2 }}
securityContext:
  {{- toYaml $v.gpuPods.securityContext | nindent 2 }}
{{- end -}}

{{/*
miles.exportMemoryBytes: the export pod's memory request in bytes: hooks.export.resources' when set, else the
model's tensors twice (the exporter holds them read and converted) in bf16, model.parameterCount × 2 × 2, plus
8 GiB for the interpreter with torch, Megatron and SGLang imported.
*/}}
{{- define "miles.exportMemoryBytes" -}}
{{- $set := (.Values.hooks.export.resources.requests | default dict).memory -}}
{{- if $set -}}
{{- include "miles.quantityBytes" $set -}}
{{- else -}}
{{- add (mul (int64 .Values.model.parameterCount) 4) (mul 8 1073741824) -}}
{{- end -}}
{{- end -}}

{{/* miles.exportResources: hooks.export.resources with the computed memory request (and limit) when none is set. */}}
{{- define "miles.exportResources" -}}
{{- $r := deepCopy .Values.hooks.export.resources -}}
{{- $requests := $r.requests | default dict -}}
{{- if not $requests.memory -}}
{{- $mem := printf "%dMi" (div (add (include "miles.exportMemoryBytes" . | int64) 1048575) 1048576) -}}
{{- $_ := set $requests "memory" $mem -}}
{{- $limits := $r.limits | default dict -}}
{{- if not $limits.memory }}{{ $_ := set $limits "memory" $mem }}{{ end -}}
{{- $_ := set $r "limits" $limits -}}
{{- end -}}
{{- $_ := set $r "requests" $requests -}}
{{- toYaml $r -}}
{{- end -}}

{{/* miles.exportEnabled: "true" when the release renders the export template (hooks.enabled and hooks.export.enabled). */}}
{{- define "miles.exportEnabled" -}}
{{- if and .Values.hooks.enabled .Values.hooks.export.enabled }}true{{ end -}}
{{- end -}}

{{/* miles.exportOnRunEnd: "true" when the RayJob's submitter makes an export Job as the run ends (and so holds the rights to). */}}
{{- define "miles.exportOnRunEnd" -}}
{{- if and (include "miles.exportEnabled" .) .Values.hooks.export.onRunEnd (eq .Values.mode "rayJob") }}true{{ end -}}
{{- end -}}

{{/*
miles.hookRbacKeys: JSON list of the values keys of the hook steps (and of the helm test pods: "test"
for the status pod, "testReport" for the report pod) that run with the hooks' ServiceAccount; empty when
hooks.rbac.create is false. The hook RBAC objects exist only when it is non-empty, and the Role grants
only what these steps use.
*/}}
{{- define "miles.hookRbacKeys" -}}
{{- $keys := list -}}
{{- if .Values.hooks.rbac.create -}}
{{- range (include "miles.hookSteps" . | fromJsonArray) }}{{ $keys = append $keys .key }}{{ end -}}
{{- if and .Values.hooks.enabled .Values.hooks.test.enabled -}}
{{- /* mode rayJob renders the report pod alone (hooks/pod.yaml), which calls no API */ -}}
{{- if ne .Values.mode "rayJob" }}{{ $keys = append $keys "test" }}{{ end -}}
{{- $keys = append $keys "testReport" -}}
{{- end -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{/*
miles.apiDryRun: "true" when preflight sends the release's objects to the API server as a dry run.
*/}}
{{- define "miles.apiDryRun" -}}
{{- $p := .Values.hooks.preflight -}}
{{- if and .Values.hooks.enabled $p.enabled $p.apiDryRun }}true{{ end -}}
{{- end -}}

{{/*
miles.imageFacts: "true" when prepare-data runs the miles image's version report (a pod it starts, so its pod
gets the API token): hooks.prepareData.imageFacts, with the pods grant of preflight's Role (or the user's
own RBAC when the chart creates none).
*/}}
{{- define "miles.imageFacts" -}}
{{- $v := .Values -}}
{{- if and $v.hooks.enabled $v.hooks.prepareData.enabled $v.hooks.prepareData.imageFacts (or (not $v.hooks.rbac.create) (include "miles.preflightRbac" .)) }}true{{ end -}}
{{- end -}}

{{/* miles.rayAuthSecretToCreate: the name of the Ray token Secret preflight creates when absent (secrets.rayAuth without existingSecret), else empty. */}}
{{- define "miles.rayAuthSecretToCreate" -}}
{{- range (include "miles.secretRefs" . | fromJsonArray) }}{{ if .generate }}{{ .name }}{{ end }}{{ end -}}
{{- end -}}

{{/* miles.preflightRbac: "true" when the chart grants preflight its rights (a pre-phase Role of its own). */}}
{{- define "miles.preflightRbac" -}}
{{- if has "preflight" (include "miles.hookRbacKeys" . | fromJsonArray) }}true{{ end -}}
{{- end -}}

{{/*
miles.preflightClusterRules: JSON list of the cluster-scope rules preflight's code calls: node reads for its
node checks; without the dry run, a read of the release's own namespace (its Pod Security label). Empty when
preflight calls none, or runs without the chart's RBAC: then no ClusterRole is rendered.
*/}}
{{- define "miles.preflightClusterRules" -}}
{{- $rules := list -}}
{{- if include "miles.preflightRbac" . -}}
{{- if .Values.hooks.preflight.nodeChecks -}}
{{- $rules = append $rules (dict "apiGroups" (list "") "resources" (list "nodes") "verbs" (list "get" "list")) -}}
{{- end -}}
{{- if not (include "miles.apiDryRun" .) -}}
{{- $rules = append $rules (dict "apiGroups" (list "") "resources" (list "namespaces") "resourceNames" (list .Release.Namespace) "verbs" (list "get")) -}}
{{- end -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}

{{/* miles.preflightRuns: "true" when the release runs the preflight hook (it then reads the release's manifests). */}}
{{- define "miles.preflightRuns" -}}
{{- if and .Values.hooks.enabled .Values.hooks.preflight.enabled }}true{{ end -}}
{{- end -}}

{{/* miles.hookReaderRbac: "true" when a step that reads the RayCluster runs with the chart's RBAC (wait-ready, the test status pod). */}}
{{- define "miles.hookReaderRbac" -}}
{{- $keys := include "miles.hookRbacKeys" . | fromJsonArray -}}
{{- if or (has "waitReady" $keys) (has "test" $keys) }}true{{ end -}}
{{- end -}}

{{/*
miles.dryRunManifests: the release's objects that exist only after preflight, as one multi-document
YAML (the hook copy of the run spec carries it to preflight: for its dry run, or without it, for the pods
it judges against the namespace's Pod Security label). Left out: the run spec ConfigMaps (they
carry this), the hooks' own RBAC and ServiceAccount, the egress policy's hook copy and the preflight Job
(created before preflight runs), the helm test pod.
tests/chart checks that every template file is either listed here or named as left out.
*/}}
{{- define "miles.dryRunTemplates" -}}
{{- toJson (list
  "serviceaccount/serviceaccount.yaml"
  "storage/storageclass.yaml"
  "storage/persistentvolume.yaml"
  "storage/persistentvolumeclaim.yaml"
  "plugins/configmap.yaml"
  "networkpolicy/networkpolicy.yaml"
  "networkpolicy/egress.yaml"
  "raycluster/raycluster.yaml"
  "raycluster/podmonitor.yaml"
  "rayjob/rayjob.yaml"
  "dashboards/configmap.yaml"
  "single-node/job.yaml"
  "reward/deployment.yaml"
  "reward/service.yaml"
  "reward/poddisruptionbudget.yaml"
  "reward/podmonitor.yaml"
  "reward/networkpolicy.yaml"
  "hooks/job.yaml"
  "hooks/export-cronjob.yaml") -}}
{{- end -}}

{{- define "miles.dryRunManifests" -}}
{{- $preflight := include "miles.componentName" (dict "context" . "component" "preflight") -}}
{{- range (include "miles.dryRunTemplates" . | fromJsonArray) }}
{{- range $doc := splitList "\n---" (include (print $.Template.BasePath "/" .) $) }}
{{- $obj := fromYaml $doc }}
{{- /* the preflight Job itself exists already: the API server admitted it */ -}}
{{- if and $obj.kind (not (and (eq $obj.kind "Job") (eq $obj.metadata.name $preflight))) }}
---
{{ trim $doc }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
miles.dryRunResources: JSON {apiGroup: [resource, ...]} of the objects in miles.dryRunManifests, plus pods
for the pod templates of the RayCluster, Jobs and Deployments (preflight dry-runs a Pod from each). Kinds
the chart renders only.
*/}}
{{- define "miles.dryRunResources" -}}
{{- $plural := dict "ServiceAccount" "serviceaccounts" "StorageClass" "storageclasses" "PersistentVolume" "persistentvolumes" "PersistentVolumeClaim" "persistentvolumeclaims" "ConfigMap" "configmaps" "NetworkPolicy" "networkpolicies" "RayCluster" "rayclusters" "RayJob" "rayjobs" "Job" "jobs" "Deployment" "deployments" "Service" "services" "PodDisruptionBudget" "poddisruptionbudgets" "PodMonitor" "podmonitors" "Pod" "pods" "CronJob" "cronjobs" -}}
{{- $cluster := list "StorageClass" "PersistentVolume" -}}
{{- $out := dict -}}
{{- range $doc := splitList "\n---\n" (include "miles.dryRunManifests" .) -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj.kind (not (has $obj.kind $cluster)) -}}
{{- $kinds := list $obj.kind -}}
{{- if has $obj.kind (list "RayCluster" "RayJob" "Job" "CronJob" "Deployment") }}{{ $kinds = append $kinds "Pod" }}{{ end -}}
{{- range $kind := $kinds -}}
{{- $group := ternary "" (regexReplaceAll "/[^/]*$" $obj.apiVersion "") (eq $kind "Pod") -}}
{{- if not (contains "/" $obj.apiVersion) }}{{ $group = "" }}{{ end -}}
{{- $res := get $plural $kind | required (printf "miles.dryRunResources: no resource name for kind %s" $kind) -}}
{{- $_ := set $out $group (append (get $out $group | default list) $res | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
