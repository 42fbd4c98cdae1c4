{{/*
What the run does: deploy or validate, validation with a phase, and how deploy.sh's
helm applies. Guards G-05, G-02, C-19 (_validate.tpl says how the guards work).
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

{{- /* C-19: deploy.helmApply, the schema's enum repeated (a render that skips the schema; C-20 refused a null). */ -}}
{{- $apply := toString $v.deploy.helmApply -}}
{{- if not (has $apply (list "client" "server" "auto")) -}}
{{- fail (printf "deploy.helmApply=%s: must be client (the default: --server-side=false, as Helm 3 applies), server (--server-side=true, Helm 4 only) or auto (no flag: Helm 4's own choice)." $apply) -}}
{{- end -}}
{{- end -}}
