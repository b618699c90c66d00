{{- define "berm.labels" -}}
app.kubernetes.io/name: berm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "berm.selector" -}}
app.kubernetes.io/name: berm
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "berm.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
