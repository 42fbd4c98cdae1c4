{{/*
Nulls. Guard C-20 (_validate.tpl says how the guards work).
Helm's null removes a key, and the chart's default with it: a value rendered with
toString or int64 would then read <nil> or 0 in the Job. Refused for the values
_not-null.tpl lists (generated: every setting that is neither a boolean nor a list,
and the chart's own values whose null breaks the render), whether the null is on the
value or on a map above it. Booleans still read a null as false, lists as empty.
*/}}
{{- define "nvidia-aicr.validate.nulls" -}}
{{- $values := .Values.AsMap -}}
{{- range $path := splitList " " (include "nvidia-aicr.notNull" .) -}}
{{- $node := $values -}}
{{- $found := true -}}
{{- range $part := splitList "." $path -}}
{{- if and $found (kindIs "map" $node) (hasKey $node $part) -}}
{{- $node = index $node $part -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if or (not $found) (kindIs "invalid" $node) -}}
{{- fail (printf "%s=null: a null removes the chart's default with the key, and this value cannot be rendered without one. Leave %s out to keep the default, or set the value you mean." $path $path) -}}
{{- end -}}
{{- end -}}
{{- end -}}
