{{/*
What the run does: deploy or validate, and validation with a phase.
Guards G-05, G-02 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.run" -}}
{{- $v := .Values -}}
{{- $validate := default dict $v.validate -}}

{{- /* G-05: a run must deploy or validate. */ -}}
{{- if and (not (default dict $v.deploy).enabled) (not $validate.enabled) -}}
{{- fail "deploy.enabled=false needs validate.enabled=true: a Job that neither deploys nor validates does nothing. Enable validation for an assert-only run, or turn deploy back on." -}}
{{- end -}}

{{- /* G-02: at least one non-empty phase. */ -}}
{{- if $validate.enabled -}}
{{- if eq (include "nvidia-aicr.phases" .) "[]" -}}
{{- fail "validate.enabled=true needs at least one phase in validate.phases (deployment, performance, conformance): an empty list makes aicr run every phase, performance included. Set e.g. validate.phases={deployment}." -}}
{{- end -}}
{{- end -}}
{{- end -}}
