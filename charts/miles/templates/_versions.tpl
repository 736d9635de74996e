{{/*
What the KubeRay operator the release targets (rayCluster.operatorVersion) supports: one place for each
version test, as argo-cd's templates/_versions.tpl keeps them. Each define returns "true" or nothing; a
version that does not read as MAJOR.MINOR[.PATCH] supports nothing here (miles.validate names it).
*/}}

{{/* miles.operatorVersionValid: rayCluster.operatorVersion reads as MAJOR.MINOR[.PATCH]. */}}
{{- define "miles.operatorVersionValid" -}}
{{- if regexMatch "^v?[0-9]+\\.[0-9]+(\\.[0-9]+)?$" (toString .Values.rayCluster.operatorVersion) -}}true{{- end -}}
{{- end -}}

{{/* miles.kuberaySupported: the operator is one the chart supports (1.5 or newer). */}}
{{- define "miles.kuberaySupported" -}}
{{- if and (include "miles.operatorVersionValid" .) (semverCompare ">=1.5.0-0" (toString .Values.rayCluster.operatorVersion)) -}}true{{- end -}}
{{- end -}}

{{/* miles.kuberayHas16: KubeRay 1.6 or newer: spec.upgradeStrategy on a RayCluster, spec.authOptions (a
token it can read, so a RayJob polls a token-protected dashboard). */}}
{{- define "miles.kuberayHas16" -}}
{{- if and (include "miles.operatorVersionValid" .) (semverCompare ">=1.6.0-0" (toString .Values.rayCluster.operatorVersion)) -}}true{{- end -}}
{{- end -}}
