{{/*
What the run may do in the cluster beyond its pod: extra RBAC rules, and the
snapshot agent aicr starts (its tolerations and namespace).
Guards C-12, C-13, C-14 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.cluster" -}}
{{- $v := .Values -}}

{{- /* C-12: extra rules only extend the chart's own ClusterRole. */ -}}
{{- $rbac := default dict $v.rbac -}}
{{- if and $rbac.extraRules (not $rbac.create) -}}
{{- fail "rbac.extraRules is set but rbac.create=false: the chart creates no RBAC, so the rules would be unused. Add them to the RBAC you manage for serviceAccount.name, or drop rbac.extraRules." -}}
{{- else if and $rbac.extraRules $rbac.clusterAdmin -}}
{{- fail "rbac.extraRules is set but rbac.clusterAdmin=true: cluster-admin already grants everything, so the rules would be unused. Set rbac.clusterAdmin=false to bind the chart's narrower ClusterRole, which they extend, or drop rbac.extraRules." -}}
{{- end -}}

{{- /* C-13: a toleration aicr cannot express is refused, never rendered as another one. */ -}}
{{- range $i, $t := (default list (default dict $v.snapshot).tolerations) -}}
{{- if and (kindIs "map" $t) (eq (toString (default "Equal" $t.operator)) "Exists") (ne (toString (default "" $t.value)) "") -}}
{{- fail (printf "snapshot.tolerations[%d] has operator Exists and value %q: Exists matches any value of the taint %s, so it takes none. Drop the value, or use operator Equal." $i (toString $t.value) (toString $t.key)) -}}
{{- end -}}
{{- end -}}

{{- /* C-14: aicr deletes the agent's ServiceAccount and Role in its namespace when it is done. */ -}}
{{- $snapshot := default dict $v.snapshot -}}
{{- if and $snapshot.enabled (eq (toString $snapshot.namespace) $.Release.Namespace) -}}
{{- fail (printf "snapshot.namespace is the release namespace %s: aicr deletes the agent's ServiceAccount and Role there when it is done. Use a namespace of its own (default aicr-validation)." $.Release.Namespace) -}}
{{- end -}}
{{- end -}}
