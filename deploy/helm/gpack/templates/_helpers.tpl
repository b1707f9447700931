{{/* Names and labels, decided once. */}}
{{- define "gpack.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpack.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpack.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpack.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gpack.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gpack.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The model file inside the container. */}}
{{- define "gpack.modelPath" -}}
{{- printf "/models/%s" .Values.model.file -}}
{{- end -}}

{{/*
--threads: serve.threads, else the CPU request rounded up to whole CPUs
(at least 1), else "" (no flag: gpack's default). A request gpack cannot
read is an error, not a guess.
*/}}
{{- define "gpack.threads" -}}
{{- $cpu := "" -}}
{{- with .Values.resources -}}{{- with .requests -}}{{- with .cpu -}}{{- $cpu = toString . -}}{{- end -}}{{- end -}}{{- end -}}
{{- if .Values.serve.threads -}}
{{- .Values.serve.threads | int -}}
{{- else if $cpu -}}
{{- if regexMatch "^[0-9]+m$" $cpu -}}
{{- max 1 (div (add (trimSuffix "m" $cpu | atoi) 999) 1000) -}}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?$" $cpu -}}
{{- max 1 (ceil (float64 $cpu) | int) -}}
{{- else -}}
{{- fail (printf "resources.requests.cpu %q: expected whole CPUs (\"2\", \"1.5\") or millicores (\"1500m\"); or set serve.threads" $cpu) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* SIGTERM to exit: drainGrace + drainTimeout, rounded up, + 5 s. */}}
{{- define "gpack.terminationGrace" -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- .Values.terminationGracePeriodSeconds | int -}}
{{- else -}}
{{- add (ceil (addf .Values.serve.drainGrace .Values.serve.drainTimeout) | int) 5 -}}
{{- end -}}
{{- end -}}

{{/* Values that contradict each other fail the render, naming the values. */}}
{{- define "gpack.validate" -}}
{{- if not (has .Values.model.source (list "imageVolume" "initContainer")) -}}
{{- fail (printf "model.source %q: expected imageVolume or initContainer" .Values.model.source) -}}
{{- end -}}
{{- if and (eq .Values.model.source "imageVolume") (semverCompare "<1.35.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "model.source imageVolume needs Kubernetes 1.35 or later (image volumes on by default); this cluster is %s: set model.source=initContainer" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if or (contains "/" .Values.model.file) (contains ".." .Values.model.file) (not .Values.model.file) -}}
{{- fail (printf "model.file %q: expected one plain file name (the layer's title)" .Values.model.file) -}}
{{- end -}}
{{- if and .Values.metrics.port (eq (int .Values.metrics.port) (int .Values.serve.port)) -}}
{{- fail "metrics.port must differ from serve.port (0: no separate metrics port)" -}}
{{- end -}}
{{- if and (or .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled) (not .Values.metrics.port) .Values.apiKey.existingSecret (not .Values.metrics.public) -}}
{{- fail "a ServiceMonitor/PodMonitor cannot read /metrics: it is behind the API key; set metrics.port (a separate port) or metrics.public=true" -}}
{{- end -}}
{{- if and .Values.inferenceExtension.enabled .Values.apiKey.existingSecret (not .Values.metrics.public) -}}
{{- fail "inferenceExtension: the endpoint picker reads /metrics on the API port, which the API key closes; set metrics.public=true (explicitly)" -}}
{{- end -}}
{{- if and .Values.inferenceExtension.enabled (not .Values.inferenceExtension.endpointPicker.service) -}}
{{- fail "inferenceExtension.endpointPicker.service: the endpoint picker's Service name is required" -}}
{{- end -}}
{{- end -}}
