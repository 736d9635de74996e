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


{{/* miles.egressPolicySpec: spec of the release's egress NetworkPolicy and of its pre-hook copy: every pod of
the release may reach anything but networkPolicy.egress.blockedCidrs. */}}
{{- define "miles.egressPolicySpec" -}}
{{- $v4 := list }}{{ $v6 := list }}
{{- range .Values.networkPolicy.egress.blockedCidrs }}{{ if contains ":" . }}{{ $v6 = append $v6 . }}{{ else }}{{ $v4 = append $v4 . }}{{ end }}{{ end -}}
podSelector:
  matchLabels:
    {{- include "miles.selectorLabels" . | nindent 4 }}
policyTypes: [Egress]
egress:
  - to:
      - ipBlock:
          cidr: 0.0.0.0/0
          {{- with $v4 }}
          except: {{ toJson . }}
          {{- end }}
      - ipBlock:
          cidr: ::/0
          {{- with $v6 }}
          except: {{ toJson . }}
          {{- end }}
{{- end -}}
