{{/* Names. */}}
{{- define "cbc-otel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cbc-otel.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cbc-otel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cbc-otel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cbc-otel.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "cbc-otel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "cbc-otel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cbc-otel.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* image: repository[:tag][@digest]; the tag defaults to $default. */}}
{{- define "cbc-otel.imageRef" -}}
{{- $img := index . 0 }}{{ $default := index . 1 }}
{{- $ref := $img.repository }}
{{- $tag := default $default $img.tag }}
{{- if $tag }}{{ $ref = printf "%s:%s" $ref $tag }}{{ end }}
{{- if $img.digest }}{{ $ref = printf "%s@%s" $ref $img.digest }}{{ end }}
{{- $ref }}
{{- end }}

{{- define "cbc-otel.image" -}}
{{- include "cbc-otel.imageRef" (list .Values.image .Chart.AppVersion) }}
{{- end }}

{{- define "cbc-otel.workloadImage" -}}
{{- if .Values.workload.image.repository }}
{{- include "cbc-otel.imageRef" (list .Values.workload.image "") }}
{{- else }}
{{- include "cbc-otel.image" . }}
{{- end }}
{{- end }}

{{/* Paths inside the pod. */}}
{{- define "cbc-otel.binDir" -}}/cbc-otel/bin{{- end }}
{{- define "cbc-otel.spoolDir" -}}/cbc-otel/spool{{- end }}
{{- define "cbc-otel.stateDir" -}}/cbc-otel/state{{- end }}
{{- define "cbc-otel.webConfigDir" -}}/etc/cbc-otel/web{{- end }}

{{- define "cbc-otel.scheme" -}}
{{- if .Values.webConfig.tls }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Whether the chart creates the OTLP headers Secret. */}}
{{- define "cbc-otel.otlpSecretName" -}}
{{- printf "%s-otlp" (include "cbc-otel.fullname" .) }}
{{- end }}

{{/* Checks of combinations the schema cannot express. */}}
{{- define "cbc-otel.validate" -}}
{{- if and (not .Values.sidecar.native) (ne .Values.workload.kind "Deployment") }}
{{- fail (printf "sidecar.native=false works only with workload.kind=Deployment: a plain sidecar container never exits, so a %s would never complete. Use a cluster with native sidecars (Kubernetes >= 1.29)." .Values.workload.kind) }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled: choose one, or every target is scraped twice" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.service.enabled) }}
{{- fail "serviceMonitor.enabled needs service.enabled" }}
{{- end }}
{{- if and .Values.otlp.headers .Values.otlp.existingSecret.headersKey }}
{{- fail "otlp.headers and otlp.existingSecret.headersKey: give the headers one way" }}
{{- end }}
{{- if and .Values.otlp.endpoint .Values.otlp.existingSecret.endpointKey }}
{{- fail "otlp.endpoint and otlp.existingSecret.endpointKey: give the endpoint one way" }}
{{- end }}
{{- if and (or .Values.otlp.existingSecret.endpointKey .Values.otlp.existingSecret.headersKey) (not .Values.otlp.existingSecret.name) }}
{{- fail "otlp.existingSecret keys need otlp.existingSecret.name" }}
{{- end }}
{{- if and .Values.workload.sdk.enabled (not .Values.workload.sdk.realCLI) }}
{{- fail "workload.sdk.enabled needs workload.sdk.realCLI: the real CLI inside workload.image, which the wrapper script runs under cbc-otel run" }}
{{- end }}
{{- if and (or .Values.webConfig.tls .Values.webConfig.basicAuth) (not .Values.webConfig.existingSecret) }}
{{- fail "webConfig.tls or webConfig.basicAuth need webConfig.existingSecret (the web config file)" }}
{{- end }}
{{- end }}

{{/* The probe handler of a path. */}}
{{- define "cbc-otel.probeHandler" -}}
{{- $ := index . 0 }}{{ $path := index . 1 }}
{{- if $.Values.webConfig.basicAuth -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: {{ $path }}
  port: metrics
  scheme: {{ include "cbc-otel.scheme" $ }}
{{- end }}
{{- end }}

{{/* The serve sidecar. */}}
{{- define "cbc-otel.sidecar" -}}
- name: cbc-otel
  image: {{ include "cbc-otel.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  command:
    - /usr/local/bin/cbc-otel
  args:
    - serve
    - --spool.dir={{ include "cbc-otel.spoolDir" . }}
    - --state.dir={{ include "cbc-otel.stateDir" . }}
    - --web.listen-address=:{{ .Values.sidecar.port }}
    {{- if .Values.webConfig.existingSecret }}
    - --web.config.file={{ include "cbc-otel.webConfigDir" . }}/{{ .Values.webConfig.key }}
    {{- end }}
    - --log.level={{ .Values.sidecar.logLevel }}
    - --follow.idle-timeout={{ .Values.sidecar.idleTimeout }}
    - --follow.poll-interval={{ .Values.sidecar.pollInterval }}
    - --state.checkpoint-interval={{ .Values.sidecar.checkpointInterval }}
    - --tracker.grace={{ .Values.sidecar.grace }}
    - --metrics.max-workflows={{ .Values.sidecar.maxWorkflows }}
    {{- if .Values.sidecar.spool.keep }}
    - --spool.keep
    {{- end }}
    {{- if .Values.sidecar.spool.maxBytes }}
    - --spool.max-bytes={{ int64 .Values.sidecar.spool.maxBytes }}
    {{- end }}
    {{- if or .Values.otlp.endpoint .Values.otlp.existingSecret.endpointKey }}
    - --otlp.protocol={{ .Values.otlp.protocol }}
    {{- end }}
    {{- if .Values.otlp.capturePreviews }}
    - --traces.capture-previews
    {{- end }}
    {{- with .Values.sidecar.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: metrics
      containerPort: {{ .Values.sidecar.port }}
      protocol: TCP
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: OTEL_SERVICE_NAME
      value: {{ .Values.otlp.serviceName | quote }}
    - name: OTEL_RESOURCE_ATTRIBUTES
      value: {{ include "cbc-otel.resourceAttributes" . | quote }}
    {{- if .Values.otlp.endpoint }}
    - name: OTEL_EXPORTER_OTLP_ENDPOINT
      value: {{ .Values.otlp.endpoint | quote }}
    {{- else if .Values.otlp.existingSecret.endpointKey }}
    - name: OTEL_EXPORTER_OTLP_ENDPOINT
      valueFrom:
        secretKeyRef:
          name: {{ .Values.otlp.existingSecret.name }}
          key: {{ .Values.otlp.existingSecret.endpointKey }}
    {{- end }}
    {{- if .Values.otlp.headers }}
    - name: OTEL_EXPORTER_OTLP_HEADERS
      valueFrom:
        secretKeyRef:
          name: {{ include "cbc-otel.otlpSecretName" . }}
          key: headers
    {{- else if .Values.otlp.existingSecret.headersKey }}
    - name: OTEL_EXPORTER_OTLP_HEADERS
      valueFrom:
        secretKeyRef:
          name: {{ .Values.otlp.existingSecret.name }}
          key: {{ .Values.otlp.existingSecret.headersKey }}
    {{- end }}
    {{- with .Values.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  startupProbe:
    {{- include "cbc-otel.probeHandler" (list . "/healthz") | nindent 4 }}
    periodSeconds: {{ .Values.sidecar.probes.startup.periodSeconds }}
    failureThreshold: {{ .Values.sidecar.probes.startup.failureThreshold }}
  livenessProbe:
    {{- include "cbc-otel.probeHandler" (list . "/healthz") | nindent 4 }}
    periodSeconds: {{ .Values.sidecar.probes.liveness.periodSeconds }}
    timeoutSeconds: {{ .Values.sidecar.probes.liveness.timeoutSeconds }}
    failureThreshold: {{ .Values.sidecar.probes.liveness.failureThreshold }}
  readinessProbe:
    {{- include "cbc-otel.probeHandler" (list . "/readyz") | nindent 4 }}
    periodSeconds: {{ .Values.sidecar.probes.readiness.periodSeconds }}
    timeoutSeconds: {{ .Values.sidecar.probes.readiness.timeoutSeconds }}
    failureThreshold: {{ .Values.sidecar.probes.readiness.failureThreshold }}
  {{- with .Values.sidecar.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: spool
      mountPath: {{ include "cbc-otel.spoolDir" . }}
    - name: state
      mountPath: {{ include "cbc-otel.stateDir" . }}
    {{- if .Values.webConfig.existingSecret }}
    - name: web-config
      mountPath: {{ include "cbc-otel.webConfigDir" . }}
      readOnly: true
    {{- end }}
{{- end }}

{{- define "cbc-otel.resourceAttributes" -}}
{{- $attrs := list "k8s.namespace.name=$(POD_NAMESPACE)" "k8s.pod.name=$(POD_NAME)" "k8s.node.name=$(NODE_NAME)" }}
{{- range $k, $v := .Values.otlp.resourceAttributes }}
{{- $attrs = append $attrs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $attrs }}
{{- end }}

{{/* The init container that copies the binary. */}}
{{- define "cbc-otel.install" -}}
- name: cbc-otel-install
  image: {{ include "cbc-otel.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - /usr/local/bin/cbc-otel
    - install
    - {{ include "cbc-otel.binDir" . }}
  {{- with .Values.install.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: bin
      mountPath: {{ include "cbc-otel.binDir" . }}
{{- end }}

{{/* SDK mode (workload.sdk): where the wrapper script is mounted. */}}
{{- define "cbc-otel.sdkDir" -}}/cbc-otel/sdk{{- end }}
{{- define "cbc-otel.sdkScriptName" -}}cli{{- end }}
{{- define "cbc-otel.sdkScriptPath" -}}{{ include "cbc-otel.sdkDir" . }}/{{ include "cbc-otel.sdkScriptName" . }}{{- end }}
{{- define "cbc-otel.sdkConfigMapName" -}}
{{- printf "%s-sdk-cli" (include "cbc-otel.fullname" .) }}
{{- end }}

{{/* A word quoted for sh: '...' with each ' written '\''. */}}
{{- define "cbc-otel.shq" -}}
'{{ replace "'" "'\\''" . }}'
{{- end }}

{{/*
The wrapper script of SDK mode: the agent SDK starts it instead of the CLI
(pathToClaudeCodeExecutable, pathToCodebuddyCode) and it replaces itself
(exec: same process, signals and stdio go straight to cbc-otel run) with
`cbc-otel run` over the real CLI, the SDK's arguments passed on as they came.
Everything is rendered in, so the script depends on no environment variable:
an SDK started with its own `env` option still runs it right.
*/}}
{{- define "cbc-otel.sdkScript" -}}
{{- $w := .Values.workload -}}
{{- $words := list (printf "%s/cbc-otel" (include "cbc-otel.binDir" .)) "run" (printf "--spool.dir=%s" (include "cbc-otel.spoolDir" .)) (printf "--log.level=%s" $w.wrapper.logLevel) -}}
{{- if $w.wrapper.joinCliTelemetry }}{{ $words = append $words "--cli-telemetry.join" }}{{ end -}}
{{- $words = concat $words $w.wrapper.args (list "--") $w.sdk.realCLI -}}
{{- $quoted := list -}}
{{- range $words }}{{ $quoted = append $quoted (include "cbc-otel.shq" .) }}{{ end -}}
#!/bin/sh
# cbc-otel chart, workload.sdk: the agent SDK starts this file instead of
# the CLI (pathToClaudeCodeExecutable, pathToCodebuddyCode; the app finds
# its path in ${{ $w.sdk.envName }}). It becomes `cbc-otel run`, which starts
# the real CLI with the SDK's arguments, passes its stdio through byte for
# byte and spools the stream for the cbc-otel sidecar.
exec {{ join " " $quoted }} "$@"
{{ end }}

{{/* The user's CLI, wrapped; in SDK mode the app, not wrapped. */}}
{{- define "cbc-otel.cli" -}}
{{- $w := .Values.workload -}}
- name: cli
  image: {{ include "cbc-otel.workloadImage" . | quote }}
  imagePullPolicy: {{ $w.image.pullPolicy }}
  command:
    {{- if $w.sdk.enabled }}
    {{- toYaml $w.command | nindent 4 }}
    {{- else }}
    - {{ include "cbc-otel.binDir" . }}/cbc-otel
    - run
    - --spool.dir={{ include "cbc-otel.spoolDir" . }}
    - --log.level={{ $w.wrapper.logLevel }}
    {{- if $w.wrapper.joinCliTelemetry }}
    - --cli-telemetry.join
    {{- end }}
    {{- with $w.wrapper.args }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    - --
    {{- toYaml $w.command | nindent 4 }}
    {{- end }}
  {{- with $w.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $w.workingDir }}
  workingDir: {{ . }}
  {{- end }}
  {{- if or $w.home $w.env $w.sdk.enabled }}
  env:
    {{- with $w.home }}
    - name: HOME
      value: {{ . | quote }}
    {{- end }}
    {{- if $w.sdk.enabled }}
    - name: {{ $w.sdk.envName }}
      value: {{ include "cbc-otel.sdkScriptPath" . | quote }}
    {{- end }}
    {{- with $w.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- with $w.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $w.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $w.securityContext | nindent 4 }}
  volumeMounts:
    - name: bin
      mountPath: {{ include "cbc-otel.binDir" . }}
      readOnly: true
    - name: spool
      mountPath: {{ include "cbc-otel.spoolDir" . }}
    {{- if $w.sdk.enabled }}
    - name: sdk-cli
      mountPath: {{ include "cbc-otel.sdkDir" . }}
      readOnly: true
    {{- end }}
    {{- with $w.home }}
    - name: home
      mountPath: {{ . }}
    {{- end }}
    {{- range $i, $p := $w.writablePaths }}
    - name: writable-{{ $i }}
      mountPath: {{ $p }}
    {{- end }}
    {{- with $w.volumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The pod spec shared by every workload kind. */}}
{{- define "cbc-otel.podTemplate" -}}
{{- $w := .Values.workload -}}
metadata:
  labels:
    {{- include "cbc-otel.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if or .Values.podAnnotations $w.sdk.enabled }}
  annotations:
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- if $w.sdk.enabled }}
    checksum/sdk-cli: {{ include "cbc-otel.sdkScript" . | sha256sum }}
    {{- end }}
  {{- end }}
spec:
  {{- if eq $w.kind "Deployment" }}
  restartPolicy: Always
  {{- else }}
  restartPolicy: {{ $w.job.restartPolicy }}
  {{- end }}
  serviceAccountName: {{ include "cbc-otel.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  initContainers:
    {{- include "cbc-otel.install" . | nindent 4 }}
    {{- if .Values.sidecar.native }}
    {{- include "cbc-otel.sidecar" . | nindent 4 }}
    {{- end }}
  containers:
    {{- include "cbc-otel.cli" . | nindent 4 }}
    {{- if not .Values.sidecar.native }}
    {{- include "cbc-otel.sidecar" . | nindent 4 }}
    {{- end }}
  volumes:
    - name: bin
      emptyDir:
        sizeLimit: 64Mi
    - name: spool
      emptyDir:
        sizeLimit: {{ .Values.sidecar.spool.sizeLimit }}
    - name: state
      {{- if .Values.sidecar.state.existingClaim }}
      persistentVolumeClaim:
        claimName: {{ .Values.sidecar.state.existingClaim }}
      {{- else }}
      emptyDir:
        sizeLimit: {{ .Values.sidecar.state.sizeLimit }}
      {{- end }}
    {{- if $w.home }}
    - name: home
      emptyDir: {}
    {{- end }}
    {{- range $i, $p := $w.writablePaths }}
    - name: writable-{{ $i }}
      emptyDir: {}
    {{- end }}
    {{- if .Values.webConfig.existingSecret }}
    - name: web-config
      secret:
        secretName: {{ .Values.webConfig.existingSecret }}
    {{- end }}
    {{- if $w.sdk.enabled }}
    - name: sdk-cli
      configMap:
        name: {{ include "cbc-otel.sdkConfigMapName" . }}
        items:
          - key: {{ include "cbc-otel.sdkScriptName" . }}
            path: {{ include "cbc-otel.sdkScriptName" . }}
            mode: 365 # 0555: r-x for everyone (the container's UID is not the file's owner)
    {{- end }}
    {{- with $w.volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The scrape endpoint options shared by ServiceMonitor and PodMonitor. */}}
{{- define "cbc-otel.scrapeEndpoint" -}}
{{- $m := index . 1 }}{{ $ := index . 0 -}}
path: /metrics
scheme: {{ include "cbc-otel.scheme" $ | lower }}
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: {{ $m.honorLabels }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
