{{/*
The part of the Job that Kubernetes never lets change: podFailurePolicy and the
pod template. The Job's name hashes exactly this text ("nvidia-aicr.jobName"),
so whatever is added here is in the name without anyone having to remember it.
Nothing here may depend on the chart version, the Helm major, the release
revision or the Job's own name.
*/}}
{{- define "nvidia-aicr.immutableJobSpec" -}}
{{- $v := .Values -}}
# Re-running cannot fix bad input, a failed verification or a stopped upgrade: fail the Job at
# once on those exit codes (aicr_runner.errors.DETERMINISTIC_EXIT_CODES), and
# do not count pods evicted by disruptions (drain, preemption) as failures.
podFailurePolicy:
  rules:
    - action: FailJob
      onExitCodes:
        containerName: aicr-runner
        operator: In
        values: [2, 4, 21, 24, 25, 29, 35]
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
template:
  {{- include "nvidia-aicr.podTemplate" . | nindent 2 }}
{{- end -}}

{{- define "nvidia-aicr.podTemplate" -}}
{{- $v := .Values -}}
{{- $publish := $v.validate.publish -}}
{{- $packSecret := include "nvidia-aicr.packSecretName" . -}}
{{- $publishAuth := include "nvidia-aicr.publishAuthMounted" . -}}
{{- $identityToken := include "nvidia-aicr.identityTokenMounted" . -}}
{{- $pullSecrets := include "nvidia-aicr.imagePullSecrets" . -}}
metadata:
  labels:
    {{- include "nvidia-aicr.podLabels" . | nindent 4 }}
  {{- with $v.job.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  restartPolicy: Never
  serviceAccountName: {{ include "nvidia-aicr.serviceAccountName" . | quote }}
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ int64 $v.job.terminationGracePeriodSeconds }}
  {{- if $pullSecrets }}
  imagePullSecrets:
    {{- $pullSecrets | nindent 4 }}
  {{- end }}
  {{- with $v.job.priorityClassName }}
  priorityClassName: {{ . | quote }}
  {{- end }}
  {{- with $v.job.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.job.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.job.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: aicr-runner
      image: {{ include "nvidia-aicr.image" . | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      # The image's ENTRYPOINT is aicr-runner (under tini).
      args: ["run"]
      terminationMessagePath: /dev/termination-log
      terminationMessagePolicy: FallbackToLogsOnError
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      {{- with $v.job.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # Settings that may change without a new Job (logFormat, lease timing):
      # a ConfigMap, so changing them never touches the immutable pod template.
      envFrom:
        - configMapRef:
            name: {{ include "nvidia-aicr.runtimeConfigName" . | quote }}
      env:
        # Writable locations on a read-only root (emptyDirs below).
        - name: HOME
          value: /home/aicr
        - name: TMPDIR
          value: /tmp
        - name: XDG_CACHE_HOME
          value: /home/aicr/.cache
        - name: HELM_CACHE_HOME
          value: /home/aicr/.cache/helm
        - name: HELM_CONFIG_HOME
          value: /home/aicr/.config/helm
        - name: HELM_DATA_HOME
          value: /home/aicr/.local/share/helm
        - name: KUBECACHEDIR
          value: /home/aicr/.kube/cache
        # The runtime's settings that define the install (aicr_runner.config;
        # lists are JSON arrays).
        {{- range $name, $value := include "nvidia-aicr.runtimeEnv" . | fromYaml }}
        - name: {{ $name }}
          value: {{ $value | quote }}
        {{- end }}
        - name: AICR_RUNNER_SHUTDOWN_GRACE_SECONDS
          value: {{ include "nvidia-aicr.shutdownGraceSeconds" . | quote }}
        # The install Lease: its name, and this pod and Job as the holder. A failed
        # run reads this Job's labels for the Flux HelmRelease that rendered it
        # and records its termination message there as a Warning Event. The Job
        # name comes from the label the Job controller puts on its pods: the
        # template cannot carry the name, which is a hash of the template.
        - name: AICR_RUNNER_LEASE__NAME
          value: {{ include "nvidia-aicr.leaseName" . | quote }}
        - name: AICR_RUNNER_LEASE__JOB_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['batch.kubernetes.io/job-name']
        - name: AICR_RUNNER_LEASE__POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        {{- with $v.job.extraEnv }}
        # job.extraEnv, verbatim, after the chart's own entries.
        {{- toYaml . | nindent 8 }}
        {{- end }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        - name: work
          mountPath: /work
        - name: home
          mountPath: /home/aicr
        {{- if $packSecret }}
        - name: pack-auth
          mountPath: /etc/aicr-runner/pack-auth
          readOnly: true
        {{- end }}
        {{- if eq $publishAuth "true" }}
        - name: publish-auth
          mountPath: /etc/aicr-runner/publish-auth
          readOnly: true
        {{- end }}
        {{- if eq $identityToken "true" }}
        - name: identity-token
          mountPath: /etc/aicr-runner/identity-token
          readOnly: true
        {{- end }}
        {{- with $v.job.extraVolumeMounts }}
        # job.extraVolumeMounts, verbatim.
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
    - name: work
      {{- if $v.job.workSizeLimit }}
      emptyDir:
        sizeLimit: {{ $v.job.workSizeLimit | quote }}
      {{- else }}
      emptyDir: {}
      {{- end }}
    - name: home
      emptyDir: {}
    {{- if $packSecret }}
    # Pack pull credential (dataPackSecret or the chart-created Secret), as a file.
    - name: pack-auth
      secret:
        secretName: {{ $packSecret | quote }}
        items:
          - key: .dockerconfigjson
            path: config.json
            mode: 0440
    {{- end }}
    {{- if eq $publishAuth "true" }}
    # Evidence push credential; the runtime hands it to the publish call only.
    - name: publish-auth
      secret:
        secretName: {{ $publish.registrySecret | quote }}
        items:
          - key: .dockerconfigjson
            path: config.json
            mode: 0440
    {{- end }}
    {{- if eq $identityToken "true" }}
    # Short-lived OIDC token for keyless signing, read at publish time. Never an env var.
    - name: identity-token
      secret:
        secretName: {{ $publish.identityTokenSecret.name | quote }}
        items:
          - key: {{ $publish.identityTokenSecret.key | quote }}
            path: token
            mode: 0440
    {{- end }}
    {{- with $v.job.extraVolumes }}
    # job.extraVolumes, verbatim.
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
