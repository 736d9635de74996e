{{/* miles.rewardPod: pod template of the reward service (restricted Pod Security Standard, off GPU nodes). */}}
{{- define "miles.rewardPod" -}}
{{- $v := .Values -}}
{{- $r := $v.reward -}}
{{- $pools := include "miles.pools" . | fromJson -}}
{{- $env := list
  (dict "name" "REWARD_PORT" "value" "8080")
  (dict "name" "REWARD_BACKEND" "value" $r.backend)
  (dict "name" "REWARD_TIMEOUT_SECONDS" "value" (toString $r.timeoutSeconds))
  (dict "name" "REWARD_LOG_LEVEL" "value" $r.logLevel)
-}}
{{- if eq $r.backend "math_verify" -}}{{- $env = append $env (dict "name" "REWARD_MATH_ANSWER" "value" $r.mathAnswer) -}}{{- end -}}
{{- if gt (int $r.workers) 0 -}}{{- $env = append $env (dict "name" "REWARD_WORKERS" "value" (toString (int $r.workers))) -}}{{- end -}}
{{- if gt (int $r.maxInflight) 0 -}}{{- $env = append $env (dict "name" "REWARD_MAX_INFLIGHT" "value" (toString (int $r.maxInflight))) -}}{{- end -}}
{{- if $r.modelPath -}}
{{- $env = append $env (dict "name" "REWARD_MODEL_PATH" "value" (include "miles.path" (dict "context" . "path" $r.modelPath))) -}}
{{- end -}}
{{- $probe := dict "httpGet" (dict "path" "/health" "port" "http") "periodSeconds" 10 "timeoutSeconds" 2 "failureThreshold" 3 -}}
{{- $container := dict
  "name" "reward"
  "image" (include "miles.rewardImage" .)
  "imagePullPolicy" $r.image.pullPolicy
  "env" $env
  "ports" (list (dict "name" "http" "containerPort" 8080 "protocol" "TCP"))
  "resources" $r.resources
  "securityContext" $v.securityContext
  "startupProbe" (dict "httpGet" (dict "path" "/health" "port" "http") "periodSeconds" 2 "failureThreshold" 60)
  "livenessProbe" $probe
  "readinessProbe" (dict "httpGet" (dict "path" "/ready" "port" "http") "periodSeconds" 5 "timeoutSeconds" 2 "failureThreshold" 2)
-}}
{{- $affinity := dict -}}
{{- if $r.avoidGpuNodes -}}
{{- $affinity = dict "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list (dict "matchExpressions" (list (dict "key" "nvidia.com/gpu.present" "operator" "NotIn" "values" (list "true"))))))) -}}
{{- end -}}
{{- $spread := list (dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" (dict "matchLabels" (include "miles.componentSelectorLabels" (dict "context" . "component" "reward") | fromYaml))) -}}
{{- $pod := dict
  "serviceAccountName" (include "miles.serviceAccountName" .)
  "automountToken" false
  "podSecurityContext" $v.podSecurityContext
  "nodeSelector" $pools.reward.nodeSelector
  "tolerations" $pools.reward.tolerations
  "affinity" $affinity
  "topologySpreadConstraints" $spread
  "terminationGracePeriodSeconds" (int $r.terminationGracePeriodSeconds)
  "storage" true
  "tmp" true
  "container" $container
-}}
{{- include "miles.podTemplate" (dict "context" . "component" "reward" "pod" $pod) -}}
{{- end -}}
