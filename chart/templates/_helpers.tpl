{{/*
Shared helpers. Guards live in _validate.tpl; the criteria catalog check lives in
_criteria.tpl.
*/}}

{{/* Chart label value: name-version with "+" replaced (Helm label rules). */}}
{{- define "nvidia-aicr.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades. */}}
{{- define "nvidia-aicr.selectorLabels" -}}
app.kubernetes.io/name: nvidia-aicr
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Common labels on every object the chart renders. */}}
{{- define "nvidia-aicr.labels" -}}
{{ include "nvidia-aicr.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ include "nvidia-aicr.chart" . | quote }}
{{- end -}}

{{/*
Base name of the Job: "<release>-install", cut so that "-<10 hex>" still fits a
label value (63 characters; the Job controller labels pods with the Job name).
*/}}
{{- define "nvidia-aicr.fullname" -}}
{{- printf "%s-install" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The runner image reference: by digest when image.digest is set. */}}
{{- define "nvidia-aicr.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag | toString) -}}
{{- end -}}
{{- end -}}

{{/*
Content-addressed Job name: "<fullname>-<sha256 of (values, chart, appVersion,
image) cut to 10>". The same inputs always give the same name, so a re-sync is a
no-op instead of an immutable-field error; any change gives a new Job. Never
.Release.Revision: Argo CD renders with `helm template`, where it is always 1.
*/}}
{{- define "nvidia-aicr.jobName" -}}
{{- $inputs := dict "values" .Values "appVersion" .Chart.AppVersion "chart" .Chart.Version "image" (include "nvidia-aicr.image" .) -}}
{{- printf "%s-%s" (include "nvidia-aicr.fullname" .) (toJson $inputs | sha256sum | trunc 10) -}}
{{- end -}}

{{- define "nvidia-aicr.serviceAccountName" -}}
{{- printf "%s-installer" .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Namespace in the name: two same-named releases in different namespaces never collide. */}}
{{- define "nvidia-aicr.clusterRoleBindingName" -}}
{{- printf "%s-%s-installer" .Release.Namespace .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the chart-created pack pull Secret (dataPackAuth). */}}
{{- define "nvidia-aicr.packAuthSecretName" -}}
{{- printf "%s-pack-auth" .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/*
The Secret the pack pull uses: dataPackSecret, the chart-created one, or "".
Both job.yaml and secret-pack-auth.yaml go through this, so the created name and
the mounted name cannot drift.
*/}}
{{- define "nvidia-aicr.packSecretName" -}}
{{- if .Values.dataPackSecret -}}
{{- .Values.dataPackSecret -}}
{{- else if and (kindIs "map" .Values.dataPackAuth) .Values.dataPackAuth.dockerconfigjson -}}
{{- include "nvidia-aicr.packAuthSecretName" . -}}
{{- end -}}
{{- end -}}

{{/* Booleans reach the runtime as exactly "true" or "false", decided by Helm truthiness here only. */}}
{{- define "nvidia-aicr.bool" -}}
{{- if . -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{/* Validation phases with empty entries dropped. Returns JSON (a list). */}}
{{- define "nvidia-aicr.phases" -}}
{{- $phases := list -}}
{{- if kindIs "slice" .Values.validate.phases -}}
{{- range .Values.validate.phases -}}
{{- if . -}}{{- $phases = append $phases (toString .) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $phases -}}
{{- end -}}

{{/* Whether publishing is on (validate.publish.enabled). */}}
{{- define "nvidia-aicr.publishEnabled" -}}
{{- if .Values.validate.publish.enabled -}}true{{- end -}}
{{- end -}}

{{/* The publish-auth mount exists exactly when publishing with a registrySecret. */}}
{{- define "nvidia-aicr.publishAuthMounted" -}}
{{- if and .Values.validate.publish.enabled .Values.validate.publish.registrySecret -}}true{{- end -}}
{{- end -}}

{{/* The identity token file exists exactly when publishing in signed mode. */}}
{{- define "nvidia-aicr.identityTokenMounted" -}}
{{- $p := .Values.validate.publish -}}
{{- if and $p.enabled (eq (toString $p.mode) "signed") $p.identityTokenSecret.name -}}true{{- end -}}
{{- end -}}

{{/* Seconds the runtime lets a running child finish after SIGTERM: the grace period minus 15 s for the status write. */}}
{{- define "nvidia-aicr.shutdownGraceSeconds" -}}
{{- max 0 (sub (int64 .Values.job.terminationGracePeriodSeconds) 15) -}}
{{- end -}}
