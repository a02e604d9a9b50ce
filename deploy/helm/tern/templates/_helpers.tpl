{{/*
Labels Helm's conventions add to every object of the release. They sit next
to the labels deploy/ sets and never in a selector, so the chart's objects
match deploy/'s once these are removed (deploy/helm/helm_test.go does).
*/}}
{{- define "tern.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tern
{{- end }}

{{/* The images' tag: values image.tag, else the chart's appVersion. */}}
{{- define "tern.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end }}

{{- define "tern.operatorImage" -}}
{{- printf "%s:%s" .Values.image.operator.repository (include "tern.tag" .) -}}
{{- end }}

{{- define "tern.terndImage" -}}
{{- printf "%s:%s" .Values.image.ternd.repository (include "tern.tag" .) -}}
{{- end }}

{{/* The namespace of the adopter's Gateway and of its dataplane pods. */}}
{{- define "tern.gatewayNamespace" -}}
{{- .Values.gateway.namespace | default .Release.Namespace -}}
{{- end }}

{{/*
The labels of the ternd pods the operator renders for every Gateway
(operator/render/conventions.go: STUNner's app=stunner), narrowed to one
Gateway when gateway.name is set.
*/}}
{{- define "tern.dataplaneSelector" -}}
app: stunner
{{- with .Values.gateway.name }}
stunner.l7mp.io/related-gateway-name: {{ . }}
{{- end }}
{{- end }}
