{{/*
miles.hookSteps: JSON list of the hook steps this release renders, in the order of docs/hooks.md "Sequence".
Each: key (values key), step (CLI subcommand), name (Job suffix, default step), runSpec (ConfigMap the
pod mounts). convert (pre-install) runs in the miles image with GPUs; convertCheck (pre-upgrade) runs
the same step in the hooks image on CPU, because the running RayCluster holds the GPUs during an upgrade.
Post-install/post-upgrade steps run only in rayCluster mode; convert only for the megatron backend.
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
{{- if $v.hooks.convertCheck.enabled -}}{{- $steps = append $steps (dict "key" "convertCheck" "step" "convert" "name" "convert-check" "runSpec" $pre) -}}{{- end -}}
{{- if eq $v.mode "rayCluster" -}}
{{- if $v.hooks.waitReady.enabled -}}{{- $steps = append $steps (dict "key" "waitReady" "step" "wait-ready" "runSpec" $post) -}}{{- end -}}
{{- if $v.hooks.verify.enabled -}}{{- $steps = append $steps (dict "key" "verify" "step" "verify" "runSpec" $post) -}}{{- end -}}
{{- if $v.hooks.submit.enabled -}}{{- $steps = append $steps (dict "key" "submit" "step" "submit" "runSpec" $post) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $steps -}}
{{- end -}}

{{/* miles.hookEnv: env of a hooks-image container. (dict "context" $ "hf" bool) */}}
{{- define "miles.hookEnv" -}}
{{- $v := .context.Values -}}
{{- $env := list
  (dict "name" "POD_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "MILES_HOOKS_LOG_FORMAT" "value" $v.hooks.logFormat)
-}}
{{- if .hf -}}
{{- $env = concat $env (include "miles.secretEnv" (dict "context" .context "purposes" (list "huggingface")) | fromJsonArray) -}}
{{- end -}}
{{- toJson (concat $env $v.hooks.extraEnv) -}}
{{- end -}}

{{/*
miles.hookPod: pod template of a hook Job or the test pod. (dict "context" $ "step" dict "restartPolicy" "Never")
Hooks-image pods follow the restricted Pod Security Standard. The convert pod runs the miles image
(root, GPUs) with an init container copying miles_hooks from the hooks image (docs/CONTRACTS.md).
*/}}
{{- define "miles.hookPod" -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $s := .step -}}
{{- $cmd := list "miles-hooks" $s.step "--spec" "/etc/miles/run.json" "--log-format" $v.hooks.logFormat -}}
{{- if eq $s.key "test" -}}{{- $cmd = concat $cmd (list "--kube" "auto") -}}{{- end -}}
{{- if eq $s.key "testReport" -}}{{- $cmd = concat $cmd (list "--fail-on" $v.hooks.test.reportFailOn "--timeout" (toString $v.hooks.test.reportTimeoutSeconds)) -}}{{- end -}}
{{- /* only steps that call the Kubernetes API get a token */ -}}
{{- $pod := dict
  "serviceAccountName" (include "miles.hooksServiceAccountName" $ctx)
  "automountToken" (has $s.key (list "preflight" "waitReady" "submit" "test"))
  "restartPolicy" "Never"
  "runSpec" $s.runSpec
  "tmp" true
-}}
{{- if eq $s.key "convert" -}}
{{- $pools := include "miles.pools" $ctx | fromJson -}}
{{- $init := dict
  "name" "copy-miles-hooks"
  "image" (include "miles.hooksImage" $ctx)
  "imagePullPolicy" $v.hooks.image.pullPolicy
  "command" (list "cp" "-r" "/opt/miles-hooks/pkg/." "/miles-hooks/")
  "resources" $v.hooks.resources
  "securityContext" $v.hooks.securityContext
  "volumeMounts" (list (dict "name" "miles-hooks" "mountPath" "/miles-hooks"))
-}}
{{- $main := dict
  "name" "convert"
  "image" (include "miles.image" $ctx)
  "imagePullPolicy" $v.image.pullPolicy
  "command" (list "python3" "-m" "miles_hooks" "convert" "--spec" "/etc/miles/run.json" "--log-format" $v.hooks.logFormat "--timeout" (toString (sub (int $v.hooks.convert.activeDeadlineSeconds) 120)))
  "env" (concat (include "miles.hookEnv" (dict "context" $ctx "hf" false) | fromJsonArray) (list (dict "name" "PYTHONPATH" "value" "/miles-hooks")))
  "resources" (include "miles.gpuResources" (dict "context" $ctx "base" $v.hooks.convert.resources "gpus" (int $v.hooks.convert.nprocPerNode) "efa" false) | fromJson)
  "securityContext" $v.gpuSecurityContext
  "volumeMounts" (list (dict "name" "miles-hooks" "mountPath" "/miles-hooks" "readOnly" true))
-}}
{{- $_ := set $pod "initContainers" (list $init) -}}
{{- $_ := set $pod "container" $main -}}
{{- $_ := set $pod "volumes" (list (dict "name" "miles-hooks" "emptyDir" (dict "sizeLimit" "256Mi"))) -}}
{{- $_ := set $pod "storage" true -}}
{{- $_ := set $pod "shmSize" $v.hooks.convert.shmSize -}}
{{- $_ := set $pod "podSecurityContext" $v.gpuPodSecurityContext -}}
{{- $_ := set $pod "nodeSelector" $pools.worker.nodeSelector -}}
{{- $_ := set $pod "tolerations" $pools.worker.tolerations -}}
{{- $_ := set $pod "scheduling" true -}}
{{- else -}}
{{- $main := dict
  "name" (default $s.step $s.name)
  "image" (include "miles.hooksImage" $ctx)
  "imagePullPolicy" $v.hooks.image.pullPolicy
  "command" $cmd
  "env" (include "miles.hookEnv" (dict "context" $ctx "hf" (eq $s.key "prepareData")) | fromJsonArray)
  "resources" (ternary $v.hooks.prepareData.resources $v.hooks.resources (and (eq $s.key "prepareData") (not (empty $v.hooks.prepareData.resources))))
  "securityContext" $v.hooks.securityContext
-}}
{{- $_ := set $pod "container" $main -}}
{{- $_ := set $pod "podSecurityContext" $v.hooks.podSecurityContext -}}
{{- $pools := include "miles.pools" $ctx | fromJson -}}
{{- $_ := set $pod "nodeSelector" $pools.hooks.nodeSelector -}}
{{- $_ := set $pod "tolerations" $pools.hooks.tolerations -}}
{{- $_ := set $pod "storage" (has $s.key (list "prepareData" "convertCheck" "submit" "testReport")) -}}
{{- end -}}
{{- include "miles.podTemplate" (dict "context" $ctx "component" (printf "hook-%s" (default $s.step $s.name)) "pod" $pod) -}}
{{- end -}}

{{/*
miles.hookRbacKeys: JSON list of the values keys of the hook steps (and "test" for the helm test pods)
that run with the hooks' ServiceAccount; empty when hooks.rbac.create is false. The hook RBAC objects
exist only when it is non-empty, and the Role grants only what these steps use.
*/}}
{{- define "miles.hookRbacKeys" -}}
{{- $keys := list -}}
{{- if .Values.hooks.rbac.create -}}
{{- range (include "miles.hookSteps" . | fromJsonArray) }}{{ $keys = append $keys .key }}{{ end -}}
{{- if and .Values.hooks.enabled .Values.hooks.test.enabled }}{{ $keys = append $keys "test" }}{{ end -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}
