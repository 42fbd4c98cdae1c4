{{/*
Shared helpers. Guards live in _validate.tpl; the criteria catalog check lives in
_criteria.tpl.
*/}}

{{/* Chart label value: name-version with "+" replaced (Helm label rules). */}}
{{- define "nvidia-aicr.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels: stable across upgrades. A nameOverride is quoted (a DNS label
such as "no" or "123" would read as a boolean or a number); the default is not,
so the labels of a release without one stay as they were.
*/}}
{{- define "nvidia-aicr.selectorLabels" -}}
app.kubernetes.io/name: {{ if .Values.nameOverride }}{{ include "nvidia-aicr.name" . | quote }}{{ else }}nvidia-aicr{{ end }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Common labels on every object the chart renders, except the Job's pod template:
the versions change with every chart release, and a Job's pod template cannot
change (see "nvidia-aicr.podLabels").
*/}}
{{- define "nvidia-aicr.labels" -}}
{{ include "nvidia-aicr.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ include "nvidia-aicr.chart" . | quote }}
{{- end -}}

{{/*
Labels of the installer pod: only what stays the same from one chart version to
the next (no helm.sh/chart, no app.kubernetes.io/version), then job.podLabels.
*/}}
{{- define "nvidia-aicr.podLabels" -}}
{{ include "nvidia-aicr.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/component: installer
{{- with .Values.job.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The app.kubernetes.io/name label: nameOverride, or nvidia-aicr. */}}
{{- define "nvidia-aicr.name" -}}
{{- toString (default "nvidia-aicr" .Values.nameOverride) -}}
{{- end -}}

{{/*
What every object's name starts with ("<base>" below), as `helm create`'s
scaffold makes its fullname: fullnameOverride; else the release name, followed
by "-<nameOverride>" when one is set and the release name does not hold it
already. Without either it is the release name, as it always was (the scaffold
would add the chart name, renaming every object of an existing release).
_validate-names.tpl keeps both overrides DNS labels of a length that fits.
*/}}
{{- define "nvidia-aicr.baseName" -}}
{{- $name := toString (default "" .Values.nameOverride) -}}
{{- if .Values.fullnameOverride -}}
{{- toString .Values.fullnameOverride -}}
{{- else if and $name (not (contains $name .Release.Name)) -}}
{{- printf "%s-%s" .Release.Name $name -}}
{{- else -}}
{{- .Release.Name -}}
{{- end -}}
{{- end -}}

{{/*
Base name of the Job: "<base>-install", cut so that "-<10 hex>" still fits a
label value (63 characters; the Job controller labels pods with the Job name).
*/}}
{{- define "nvidia-aicr.fullname" -}}
{{- printf "%s-install" (include "nvidia-aicr.baseName" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/*
The image repository with global.imageRegistry applied: it replaces the
registry of image.repository (the first path component when it names a host:
it holds a "." or a ":" or is "localhost", as Docker decides), or is prefixed
to a repository without one.
*/}}
{{- define "nvidia-aicr.imageRepository" -}}
{{- $repository := toString .Values.image.repository -}}
{{- $registry := "" -}}
{{- if kindIs "map" .Values.global -}}{{- $registry = toString (default "" .Values.global.imageRegistry) | trimSuffix "/" -}}{{- end -}}
{{- if $registry -}}
{{- $parts := splitn "/" 2 $repository -}}
{{- $first := $parts._0 -}}
{{- if and $parts._1 (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- printf "%s/%s" $registry $parts._1 -}}
{{- else -}}
{{- printf "%s/%s" $registry $repository -}}
{{- end -}}
{{- else -}}
{{- $repository -}}
{{- end -}}
{{- end -}}

{{/*
The snapshot agent's image: snapshot.image, else aicr's own
(ghcr.io/nvidia/aicr:v<aicr.version>, one "v" whether aicr.version has it or not,
as aicr tags its images and as the runtime derives it) with global.imageRegistry
applied as to image.repository.
*/}}
{{- define "nvidia-aicr.snapshotImage" -}}
{{- if .Values.snapshot.image -}}
{{- toString .Values.snapshot.image -}}
{{- else -}}
{{- $image := dict "repository" "ghcr.io/nvidia/aicr" -}}
{{- $repository := include "nvidia-aicr.imageRepository" (dict "Values" (dict "image" $image "global" .Values.global)) -}}
{{- printf "%s:v%s" $repository (trimPrefix "v" (toString .Values.aicr.version)) -}}
{{- end -}}
{{- end -}}

{{/* snapshot.nodeSelector as aicr's key=value list (JSON), sorted by key. */}}
{{- define "nvidia-aicr.snapshotNodeSelector" -}}
{{- $selectors := list -}}
{{- $map := default dict .Values.snapshot.nodeSelector -}}
{{- range $key := keys $map | sortAlpha -}}
{{- $selectors = append $selectors (printf "%s=%s" $key (toString (index $map $key))) -}}
{{- end -}}
{{- toJson $selectors -}}
{{- end -}}

{{/* snapshot.tolerations as aicr's list (JSON): a string is taken as written; a
Kubernetes toleration object becomes key=value:Effect (Equal) or key:Effect (Exists). */}}
{{- define "nvidia-aicr.snapshotTolerations" -}}
{{- $tolerations := list -}}
{{- range (default list .Values.snapshot.tolerations) -}}
{{- if kindIs "string" . -}}
{{- $tolerations = append $tolerations . -}}
{{- else -}}
{{- $value := ternary "" (printf "=%s" (toString (default "" .value))) (eq (toString (default "Equal" .operator)) "Exists") -}}
{{- $tolerations = append $tolerations (printf "%s%s:%s" .key $value .effect) -}}
{{- end -}}
{{- end -}}
{{- toJson $tolerations -}}
{{- end -}}

{{/* upgradeCheck.acknowledge as the runtime's list (JSON): component:from:to per move. */}}
{{- define "nvidia-aicr.acknowledgedMoves" -}}
{{- $moves := list -}}
{{- range (default list .Values.upgradeCheck.acknowledge) -}}
{{- $moves = append $moves (printf "%s:%s:%s" (toString .component) (toString .from) (toString .to)) -}}
{{- end -}}
{{- toJson $moves -}}
{{- end -}}

{{/* The runner image reference: by digest when image.digest is set. */}}
{{- define "nvidia-aicr.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" (include "nvidia-aicr.imageRepository" .) $img.digest -}}
{{- else -}}
{{- printf "%s:%s" (include "nvidia-aicr.imageRepository" .) (default .Chart.AppVersion $img.tag | toString) -}}
{{- end -}}
{{- end -}}

{{/*
Pull Secrets: global.imagePullSecrets (names or {name: ...}), then
imagePullSecrets, each name once. Returns YAML (a list of {name: ...}) or "".
*/}}
{{- define "nvidia-aicr.imagePullSecrets" -}}
{{- $names := list -}}
{{- $global := list -}}
{{- if kindIs "map" .Values.global -}}{{- $global = default list .Values.global.imagePullSecrets -}}{{- end -}}
{{- range (concat $global (default list .Values.imagePullSecrets)) -}}
{{- $name := "" -}}
{{- if kindIs "map" . -}}{{- $name = toString (default "" .name) -}}{{- else -}}{{- $name = toString . -}}{{- end -}}
{{- if and $name (not (has $name $names)) -}}{{- $names = append $names $name -}}{{- end -}}
{{- end -}}
{{- $references := list -}}
{{- range $names }}{{ $references = append $references (dict "name" .) }}{{ end -}}
{{- if $references }}{{ toYaml $references }}{{ end -}}
{{- end -}}

{{/* The runtime settings as env maps ("nvidia-aicr.runtimeEnv", "nvidia-aicr.runnerSettingsEnv"): _env.tpl, generated. */}}

{{/*
Content-addressed Job name: "<fullname>-<sha256 cut to 10>" of the Job's
immutable spec as rendered (the pod template and podFailurePolicy, see
_pod.tpl) and the rerun token (job.rerun; the text hashed still says "rerun:", as
before the values regrouping, so the names stay what they were). Everything that
reaches the pod template is in the name by construction: a value that changes the template gives a new Job
(never "field is immutable" on upgrade), and the same template gives the same
Job, whatever the chart version, the Helm major (3 or 4) or the delivery tool.
Its text is hashed, comments included: a comment edited in _pod.tpl renames the
Job too (tests/chart/job-names.json records the names; a rename is deliberate).
So nothing in the template may vary on its own: no chart version, no
.Release.Revision (always 1 under Argo CD), no raw .Values (Helm 4 drops null
defaults that Helm 3 keeps), and not the Job's own name (the pod reads it from
the label the Job controller sets). Credentials are Secret names in the
template, never their contents; the settings that may change without a new Job
live in the runner-settings ConfigMap, outside the template.
*/}}
{{- define "nvidia-aicr.jobName" -}}
{{- $identity := include "nvidia-aicr.immutableJobSpec" . -}}
{{- $identity = printf "%s\n---\nrerun: %s\n" $identity (toString (default "" .Values.job.rerun)) -}}
{{- printf "%s-%s" (include "nvidia-aicr.fullname" .) ($identity | sha256sum | trunc 10) -}}
{{- end -}}

{{/* The install Lease: one per release, in the release namespace. */}}
{{- define "nvidia-aicr.leaseName" -}}
{{- include "nvidia-aicr.fullname" . -}}
{{- end -}}

{{/* The re-validation CronJob: 52 characters at most, so that the Jobs it names "<cronjob>-<minutes>" fit. */}}
{{- define "nvidia-aicr.revalidateName" -}}
{{- printf "%s-revalidate" (include "nvidia-aicr.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The verdict report (docs/reports.md): one per release, in the release namespace. */}}
{{- define "nvidia-aicr.reportName" -}}
{{- printf "aicr-%s" (include "nvidia-aicr.baseName" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* The ConfigMap of runtime settings that may change without a new Job (envFrom). */}}
{{- define "nvidia-aicr.runtimeConfigName" -}}
{{- printf "%s-runner-settings" (include "nvidia-aicr.baseName" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* The installer's ServiceAccount: serviceAccount.name, or "<base>-installer". */}}
{{- define "nvidia-aicr.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{- toString .Values.serviceAccount.name -}}
{{- else -}}
{{- printf "%s-installer" (include "nvidia-aicr.baseName" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Name of the chart's Role, RoleBinding and (rbac.clusterAdmin=false) ClusterRole base. */}}
{{- define "nvidia-aicr.roleName" -}}
{{- printf "%s-installer" (include "nvidia-aicr.baseName" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Namespace in the name: two same-named releases in different namespaces never collide. */}}
{{- define "nvidia-aicr.clusterRoleBindingName" -}}
{{- printf "%s-%s-installer" .Release.Namespace (include "nvidia-aicr.baseName" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the chart-created pack pull Secret (pack.auth). */}}
{{- define "nvidia-aicr.packAuthSecretName" -}}
{{- printf "%s-pack-auth" (include "nvidia-aicr.baseName" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/*
The Secret the pack pull uses: pack.secret, the chart-created one, or "".
Both job.yaml and secret-pack-auth.yaml go through this, so the created name and
the mounted name cannot drift.
*/}}
{{- define "nvidia-aicr.packSecretName" -}}
{{- if .Values.pack.secret -}}
{{- .Values.pack.secret -}}
{{- else if and (kindIs "map" .Values.pack.auth) .Values.pack.auth.dockerconfigjson -}}
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
