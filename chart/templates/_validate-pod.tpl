{{/*
The Job's pod: its environment, image, ServiceAccount, volumes and labels
add to the chart's own, never replace them.
Guards C-06, C-08, C-09, C-10, C-11 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.pod" -}}
{{- $v := .Values -}}

{{- /* C-06: the chart owns the runtime's settings and the credentials. */ -}}
{{- range $i, $e := (default list (default dict $v.job).extraEnv) -}}
{{- $name := toString (default "" (get (default dict $e) "name")) -}}
{{- if or (hasPrefix "AICR_RUNNER_" (upper $name)) (has $name (list "DOCKER_CONFIG" "COSIGN_IDENTITY_TOKEN")) -}}
{{- fail (printf "job.extraEnv[%d] sets %s: the chart renders every AICR_RUNNER_* setting from its values and mounts credentials as files (COSIGN_IDENTITY_TOKEN and DOCKER_CONFIG in the environment would reach every child process). Use the chart values (validate.publish.identityTokenSecret, validate.publish.registrySecret, ...) instead." $i $name) -}}
{{- end -}}
{{- end -}}

{{- /* C-08: image.repository is a repository; the chart adds the tag or digest (the schema refuses it too). */ -}}
{{- $image := default dict $v.image -}}
{{- $repository := toString (default "" $image.repository) -}}
{{- $lastPart := last (splitList "/" $repository) -}}
{{- if contains "@" $repository -}}
{{- $byDigest := splitn "@" 2 $repository -}}
{{- fail (printf "image.repository=%s carries a digest: the chart appends image.digest (or image.tag) itself. Set image.repository=%s and image.digest=%s." $repository $byDigest._0 $byDigest._1) -}}
{{- else if contains ":" $lastPart -}}
{{- $tag := last (splitList ":" $lastPart) -}}
{{- fail (printf "image.repository=%s carries a tag: the chart appends image.tag itself, so the image would be %s. Set image.repository=%s and image.tag=%s." $repository (include "nvidia-aicr.image" .) (trimSuffix (printf ":%s" $tag) $repository) $tag) -}}
{{- end -}}

{{- /* C-09: the Job needs a ServiceAccount the chart creates or one that exists. */ -}}
{{- $serviceAccount := default dict $v.serviceAccount -}}
{{- if and (not $serviceAccount.create) (not $serviceAccount.name) -}}
{{- fail "serviceAccount.create=false needs serviceAccount.name: the Job must run as an account bound to what the install needs (README \"Permissions\"). Name your existing ServiceAccount in serviceAccount.name, or set serviceAccount.create=true." -}}
{{- end -}}

{{- /* C-10: extra volumes add to the chart's, never replace them. */ -}}
{{- $job := default dict $v.job -}}
{{- $chartVolumes := list "tmp" "work" "home" "pack-auth" "publish-auth" "identity-token" -}}
{{- $volumeNames := $chartVolumes -}}
{{- range $i, $volume := (default list $job.extraVolumes) -}}
{{- $name := toString (default "" (get (default dict $volume) "name")) -}}
{{- if has $name $chartVolumes -}}
{{- fail (printf "job.extraVolumes[%d] is named %s, a volume the chart defines itself (%s): give it another name." $i $name (join ", " $chartVolumes)) -}}
{{- end -}}
{{- $volumeNames = append $volumeNames $name -}}
{{- end -}}
{{- range $i, $mount := (default list $job.extraVolumeMounts) -}}
{{- $name := toString (default "" (get (default dict $mount) "name")) -}}
{{- $path := toString (default "" (get (default dict $mount) "mountPath")) | trimSuffix "/" -}}
{{- if not (has $name $volumeNames) -}}
{{- fail (printf "job.extraVolumeMounts[%d] mounts the volume %s, which job.extraVolumes does not define. Add {name: %s, ...} to job.extraVolumes, or fix the name." $i $name $name) -}}
{{- end -}}
{{- if or (has $path (list "/tmp" "/work" "/home/aicr" "/etc/aicr-runner")) (hasPrefix "/etc/aicr-runner/" $path) -}}
{{- fail (printf "job.extraVolumeMounts[%d] mounts %s at %s, where the chart mounts its own volumes (/tmp, /work, /home/aicr, /etc/aicr-runner/...). Mount it elsewhere, e.g. /etc/%s." $i $name $path $name) -}}
{{- end -}}
{{- end -}}

{{- /* C-11: the chart's own pod labels select the installer pod (logs, the uninstall steps). */ -}}
{{- range $key, $_ := (default dict $job.podLabels) -}}
{{- if or (has $key (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "job-name" "controller-uid")) (hasPrefix "batch.kubernetes.io/" $key) -}}
{{- fail (printf "job.podLabels sets %s, a label the chart or the Job controller sets on the installer pod (kubectl logs -l and the uninstall steps select on them). Use another key." $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
