{{/*
The objects' names: fullnameOverride and nameOverride (the values of `helm
create`'s scaffold, nvidia-aicr.baseName and nvidia-aicr.name in _helpers.tpl)
must give names Kubernetes accepts, whatever the chart appends to them.
Guards C-15, C-16 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.names" -}}
{{- $v := .Values -}}
{{- $dnsLabel := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" -}}

{{- /* C-15: fullnameOverride starts every object's name; the Job's, <fullnameOverride>-install-<10 hex>, is also the pod's job-name label (63 characters at most). */ -}}
{{- $full := toString (default "" $v.fullnameOverride) -}}
{{- if and $full (not (regexMatch $dnsLabel $full)) -}}
{{- fail (printf "fullnameOverride=%q is not a DNS label: it starts the name of every object the chart renders, so it may hold lowercase letters, digits and '-', starting and ending with a letter or digit (e.g. gpu-stack)." $full) -}}
{{- else if gt (len $full) 44 -}}
{{- fail (printf "fullnameOverride=%q is %d characters, at most 44: the Job is named <fullnameOverride>-install-<10 hex>, and the Job controller puts that name in its pod's job-name label, which holds at most 63 characters. Shorten it." $full (len $full)) -}}
{{- end -}}

{{- /* C-16: nameOverride is the app.kubernetes.io/name label of every object and, without fullnameOverride, follows the release name in their names. */ -}}
{{- $name := toString (default "" $v.nameOverride) -}}
{{- if and $name (not (regexMatch $dnsLabel $name)) -}}
{{- fail (printf "nameOverride=%q is not a DNS label: it follows the release name in the name of every object the chart renders, so it may hold lowercase letters, digits and '-', starting and ending with a letter or digit (e.g. gpu-stack)." $name) -}}
{{- else if gt (len $name) 63 -}}
{{- fail (printf "nameOverride=%q is %d characters, at most 63: it is the app.kubernetes.io/name label of every object the chart renders, and a label value holds at most 63 characters. Shorten it." $name (len $name)) -}}
{{- end -}}
{{- end -}}
