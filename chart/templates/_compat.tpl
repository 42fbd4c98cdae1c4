{{/*
The compatibility layer of the values regrouping: every value that moved into a
group (aicrVersion -> aicr.version, dataPack -> pack.ref, rerun -> job.rerun, ...;
"nvidia-aicr.renamedValues", generated from the settings model, lists them) is
still honoured under its old name, so an upgrade with unchanged values renders
byte for byte what it rendered before.

For each renamed value whose old key the user set:
- the new key at its chart default: the old key's value is copied to the new key;
- the new key set to the same value: nothing to do;
- the new key set to another value: C-18 fails the render, naming both keys
  (and their values, but a credential's: secret: true).
The rest of the chart reads only the new keys. Every top-level template includes
this first: Helm renders the templates in one shared .Values, and applying it
again changes nothing (both keys then hold the same value), so the order in which
Helm renders the files does not matter.
*/}}
{{- define "nvidia-aicr.compat" -}}
{{- $values := .Values -}}
{{- range $entry := include "nvidia-aicr.renamedValues" . | fromYamlArray -}}
{{- $old := $values -}}
{{- $set := true -}}
{{- range $key := splitList "." $entry.old -}}
{{- if and $set (kindIs "map" $old) (hasKey $old $key) -}}
{{- $old = index $old $key -}}
{{- else -}}
{{- $set = false -}}
{{- end -}}
{{- end -}}
{{- if $set -}}
{{- $parent := $values -}}
{{- $path := splitList "." $entry.new -}}
{{- range $key := initial $path -}}
{{- if not (kindIs "map" (index $parent $key)) -}}
{{- $_ := set $parent $key dict -}}
{{- end -}}
{{- $parent = index $parent $key -}}
{{- end -}}
{{- $leaf := last $path -}}
{{- $new := index $parent $leaf -}}
{{- if eq (toJson $new) (toJson $entry.default) -}}
{{- $_ := set $parent $leaf $old -}}
{{- else if ne (toJson $new) (toJson $old) -}}
{{- /* C-18: the old key and its new name set to different values. */ -}}
{{- $oldText := toJson $old -}}
{{- $newText := toJson $new -}}
{{- if $entry.secret -}}
{{- $oldText = "(value not shown: a secret-bearing setting)" -}}
{{- $newText = $oldText -}}
{{- end -}}
{{- fail (printf "%s=%s and %s=%s are both set: %s is the earlier name of %s (docs/configuration.md \"Renamed values\"). Keep one: delete %s, or set it to the same value." $entry.old $oldText $entry.new $newText $entry.old $entry.new $entry.old) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
