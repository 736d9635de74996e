{{/*
miles.podTemplate: the ONE pod template of the chart, used by the Ray head and worker group
(raycluster/raycluster.yaml), the single-node Job (single-node/job.yaml), the hook Jobs and test pods
(hooks/_hooks.tpl) and the reward Deployment (reward/deployment.yaml). Those files write their
container as literal YAML; this template wraps it in the pod every one of them shares: labels,
annotations, service account, security context, pull secrets, placement, and the volumes below with
their mounts in the main container.

Input: (dict "context" $ "component" "ray-head" "pod" (dict ...)) where pod may hold:
  container                      the main container as YAML text (no volumeMounts: see below)
  initContainers                 init containers as YAML text (a list)
  labels, annotations            extra pod labels / annotations (maps)
  serviceAccountName, automountToken
  podSecurityContext             map
  nodeSelector, tolerations, affinity, topologySpreadConstraints
  scheduling                     true: scheduling.priorityClassName / schedulerName apply
  restartPolicy, terminationGracePeriodSeconds
  storage                        true: the shared claim at storage.mountPath
  shmSize                        non-empty: a memory-backed /dev/shm of that size
  tmp                            true: an emptyDir at /tmp (read-only root filesystems)
  runSpec                        name of a ConfigMap mounted read-only at /etc/miles (run.json)
  milesPlugins                   true: the chart's miles plugins (the retrying reward client) inside
                                 /root/miles/miles_plugins, when the run uses them
  volumes, volumeMounts          extra volumes of the pod and mounts of the main container (lists)
Output: a PodTemplateSpec (metadata + spec).
*/}}
{{- define "miles.podTemplate" -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $p := .pod -}}
{{- $plugins := and $p.milesPlugins (include "miles.rewardClient" $ctx) -}}
{{- $annotations := merge (dict) (default (dict) $p.annotations) $v.scheduling.podAnnotations -}}
{{- if $plugins -}}
{{- /* a subPath mount never sees a ConfigMap update: a new client is a new pod template */ -}}
{{- $annotations = merge $annotations (dict "miles.radixark.io/plugins-sha256" ($ctx.Files.Get "files/k8s_remote_rm.py" | sha256sum)) -}}
{{- end -}}
{{- $volumes := or $p.storage $p.shmSize $p.tmp $p.runSpec $plugins $p.rayToken $p.volumes -}}
metadata:
  labels:
    {{- include "miles.podLabels" (dict "context" $ctx "component" .component "extra" $p.labels) | nindent 4 }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with $p.serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  automountServiceAccountToken: {{ default false $p.automountToken }}
  {{- with $p.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  {{- if $p.scheduling }}
  {{- with $v.scheduling.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $v.scheduling.schedulerName }}
  schedulerName: {{ . }}
  {{- end }}
  {{- end }}
  {{- with $p.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.restartPolicy }}
  restartPolicy: {{ . }}
  {{- end }}
  {{- with $p.terminationGracePeriodSeconds }}
  terminationGracePeriodSeconds: {{ . }}
  {{- end }}
  {{- with $p.initContainers }}
  initContainers:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - {{ $p.container | trim | nindent 6 | trim }}
      {{- if or $volumes $p.volumeMounts }}
      volumeMounts:
        {{- if $p.storage }}
        - name: shared
          mountPath: {{ $v.storage.mountPath }}
        {{- end }}
        {{- if $p.shmSize }}
        - name: dshm
          mountPath: /dev/shm
        {{- end }}
        {{- if $p.tmp }}
        - name: tmp
          mountPath: /tmp
        {{- end }}
        {{- if $p.runSpec }}
        - name: run-spec
          mountPath: /etc/miles
          readOnly: true
        {{- end }}
        {{- if $plugins }}
        - name: miles-plugins
          mountPath: /root/miles/miles_plugins/k8s_remote_rm.py
          subPath: k8s_remote_rm.py
          readOnly: true
        {{- end }}
        {{- if $p.rayToken }}
        - name: ray-auth
          mountPath: {{ include "miles.rayTokenDir" $ctx }}
          readOnly: true
        {{- end }}
        {{- with $p.volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
  {{- if $volumes }}
  volumes:
    {{- if $p.storage }}
    - name: shared
      persistentVolumeClaim:
        claimName: {{ include "miles.claimName" $ctx }}
    {{- end }}
    {{- if $p.shmSize }}
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $p.shmSize }}
    {{- end }}
    {{- if $p.tmp }}
    - name: tmp
      emptyDir:
        sizeLimit: 1Gi
    {{- end }}
    {{- if $p.runSpec }}
    - name: run-spec
      configMap:
        name: {{ $p.runSpec }}
    {{- end }}
    {{- if $plugins }}
    - name: miles-plugins
      configMap:
        name: {{ include "miles.componentName" (dict "context" $ctx "component" "plugins") }}
    {{- end }}
    {{- with $p.rayToken }}
    - name: ray-auth
      secret:
        secretName: {{ .name }}
        items:
          - key: {{ .key }}
            path: token
        defaultMode: 0440
    {{- end }}
    {{- with $p.volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
{{- end -}}

{{/*
miles.podTemplateHashText: a rendered pod template (parsed) -> the text the RayCluster and single-node
Job name hashes are taken over. It is the layout earlier chart versions hashed (labels in selector
order, then everything else sorted), kept byte for byte: a chart upgrade that renders the same pods
must not rename, and so recreate, a running cluster or Job.
*/}}
{{- define "miles.podTemplateHashText" -}}
{{- $std := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/part-of" -}}
{{- $labels := .metadata.labels -}}
metadata:
  labels:
    {{- range $std }}
    {{ . }}: {{ get $labels . }}
    {{- end }}
    {{- range $k, $val := omit $labels "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/part-of" }}
    {{ $k }}: {{ $val | quote }}
    {{- end }}
  {{- with .metadata.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- toYaml .spec | nindent 2 }}
{{- end -}}

{{/* miles.secretEnv: env entries (secretKeyRef) of the referenced Secrets (miles.secretRefs); (dict "context" $ "purposes" (list "huggingface" ...)), no purposes = all. */}}
{{- define "miles.secretEnv" -}}
{{- range (include "miles.secretRefs" .context | fromJsonArray) }}
{{- if or (not $.purposes) (has .purpose $.purposes) }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key }}
      optional: {{ not .required }}
{{- end }}
{{- end }}
{{- end -}}

{{/* miles.podEnv: env of every Ray / single-node container: the run's runtime env (miles.runtimeEnv) plus pod-only settings. */}}
{{- define "miles.podEnv" -}}
{{- range $k, $val := (include "miles.runtimeEnv" . | fromJson) }}
- name: {{ $k }}
  value: {{ $val | quote }}
{{- end }}
- name: TOKENIZERS_PARALLELISM
  value: "false"
{{- include "miles.rayAuthMode" . }}
{{- end -}}

{{/* miles.rayAuthMode: RAY_AUTH_MODE=token when secrets.rayAuth is on; the Ray pods get the token from miles.secretEnv (purpose rayAuth), the hooks as a file (miles.rayTokenRef). */}}
{{- define "miles.rayAuthMode" -}}
{{- if .Values.secrets.rayAuth.enabled }}
- name: RAY_AUTH_MODE
  value: token
{{- end }}
{{- end -}}

{{/* miles.rayTokenRef: JSON {name,key} of the Ray token Secret, or {} when secrets.rayAuth is off. */}}
{{- define "miles.rayTokenRef" -}}
{{- $ref := dict -}}
{{- range (include "miles.secretRefs" . | fromJsonArray) }}{{ if eq .purpose "rayAuth" }}{{ $ref = pick . "name" "key" }}{{ end }}{{ end -}}
{{- toJson $ref -}}
{{- end -}}

{{/* miles.rayTokenDir: where a hook pod's Ray token file is mounted (RAY_AUTH_TOKEN_PATH points into it). */}}
{{- define "miles.rayTokenDir" -}}/var/run/secrets/miles/ray-auth{{- end -}}

{{/* miles.gpuEnv: env of the GPU pods (Ray workers, single node): pod env, NCCL and EFA settings, secrets. */}}
{{- define "miles.gpuEnv" -}}
{{- $v := .Values -}}
{{- include "miles.podEnv" . }}
- name: NCCL_DEBUG
  value: {{ $v.gpuPods.nccl.debug | quote }}
- name: NCCL_PROTO
  value: {{ $v.gpuPods.nccl.proto | quote }}
- name: NCCL_SOCKET_IFNAME
  value: {{ $v.gpuPods.nccl.socketIfname | quote }}
{{- if gt (int $v.gpuPods.efa.count) 0 }}
- name: FI_PROVIDER
  value: efa
- name: FI_EFA_USE_DEVICE_RDMA
  value: "1"
- name: FI_EFA_FORK_SAFE
  value: "1"
- name: RDMAV_FORK_SAFE
  value: "1"
{{- end }}
{{- include "miles.secretEnv" (dict "context" .) }}
{{- end -}}

{{/*
miles.gpuResources: (dict "context" $ "base" resources "gpus" n "efa" bool) -> the container's
requests and limits: those of base, plus n GPUs and (efa) the node's EFA devices, requests = limits.
*/}}
{{- define "miles.gpuResources" -}}
{{- $v := .context.Values -}}
{{- $gpu := $v.gpuPods.gpuResource -}}
{{- $efa := $v.gpuPods.efa.resourceName -}}
{{- $efaCount := ternary (int $v.gpuPods.efa.count) 0 (eq .efa true) -}}
{{- range $kind := list "requests" "limits" }}
{{- $base := default (dict) (get (default (dict) $.base) $kind) }}
{{- if gt (int $.gpus) 0 }}{{ $base = omit $base $gpu }}{{ end }}
{{- if gt $efaCount 0 }}{{ $base = omit $base $efa }}{{ end }}
{{ $kind }}:{{ if and (not $base) (le (int $.gpus) 0) (le $efaCount 0) }} {}{{ end }}
  {{- with $base }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- if gt (int $.gpus) 0 }}
  {{ $gpu }}: {{ $.gpus | toString | quote }}
  {{- end }}
  {{- if gt $efaCount 0 }}
  {{ $efa }}: {{ $efaCount | toString | quote }}
  {{- end }}
{{- end }}
{{- end -}}
