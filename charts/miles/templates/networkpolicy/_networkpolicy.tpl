{{/* miles.networkPolicyPeer: matchExpressions selecting this release's pods of the given components. (dict "context" $ "components" list) */}}
{{- define "miles.networkPolicyPeer" -}}
- key: app.kubernetes.io/instance
  operator: In
  values: [{{ .context.Release.Name | quote }}]
- key: app.kubernetes.io/name
  operator: In
  values: [{{ include "miles.name" .context | quote }}]
- key: app.kubernetes.io/component
  operator: In
  values: {{ toJson .components }}
{{- end -}}
