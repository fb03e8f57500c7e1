{{/* Names and labels (the official Dagster chart's conventions). */}}
{{- define "gps-dagster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gps-dagster.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gps-dagster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gps-dagster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gps-dagster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gps-dagster.labels" -}}
helm.sh/chart: {{ include "gps-dagster.chart" . }}
{{ include "gps-dagster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gps-dagster
{{- end -}}

{{/* Labels of one component: (list $ "component"). */}}
{{- define "gps-dagster.componentLabels" -}}
{{- $ := index . 0 -}}
{{ include "gps-dagster.labels" $ }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gps-dagster.componentSelector" -}}
{{- $ := index . 0 -}}
{{ include "gps-dagster.selectorLabels" $ }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Object names. */}}
{{- define "gps-dagster.component" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%s" (include "gps-dagster.fullname" $) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gps-dagster.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "gps-dagster.adapterServiceAccountName" -}}
{{- if .Values.serviceAccount.adapter.create -}}
{{- default (include "gps-dagster.fullname" .) .Values.serviceAccount.adapter.name -}}
{{- else -}}
{{- required "serviceAccount.adapter.name is required when serviceAccount.adapter.create is false" .Values.serviceAccount.adapter.name -}}
{{- end -}}
{{- end -}}

{{- define "gps-dagster.runLauncherServiceAccountName" -}}
{{- if .Values.serviceAccount.runLauncher.create -}}
{{- default (include "gps-dagster.component" (list . "run-launcher")) .Values.serviceAccount.runLauncher.name -}}
{{- else -}}
{{- required "serviceAccount.runLauncher.name is required when serviceAccount.runLauncher.create is false" .Values.serviceAccount.runLauncher.name -}}
{{- end -}}
{{- end -}}

{{- define "gps-dagster.jobNamespace" -}}
{{- .Values.runLauncher.config.k8sRunLauncher.jobNamespace | default .Release.Namespace -}}
{{- end -}}

{{- define "gps-dagster.full" -}}
{{- if .Values.existingDagster.enabled -}}{{- else -}}true{{- end -}}
{{- end -}}

{{- define "gps-dagster.codeLocationHost" -}}
{{- include "gps-dagster.component" (list . "code-location") -}}
{{- end -}}

{{- define "gps-dagster.apiTokenSecret" -}}
{{- .Values.api.adminToken.existingSecret | default (include "gps-dagster.component" (list . "api-token")) -}}
{{- end -}}

{{/* The database URL Secret: required, never a default. */}}
{{- define "gps-dagster.pgSecret" -}}
{{- required "postgresql.existingSecret is required: the name of a Secret holding the PostgreSQL URL (postgresql+psycopg2://...) under postgresql.secretKey" .Values.postgresql.existingSecret -}}
{{- end -}}

{{/* DAGSTER_PG_URL (dagster.yaml) and GPS_DB_URL (the product's tables, schema gps). */}}
{{- define "gps-dagster.dbEnv" -}}
- name: DAGSTER_PG_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "gps-dagster.pgSecret" . }}
      key: {{ .Values.postgresql.secretKey }}
- name: GPS_DB_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "gps-dagster.pgSecret" . }}
      key: {{ .Values.postgresql.secretKey }}
{{- end -}}

{{/* Environment of every product container: the database, then the user's extras. */}}
{{- define "gps-dagster.productEnv" -}}
{{ include "gps-dagster.dbEnv" . }}
{{- with .Values.gps.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gps-dagster.envFrom" -}}
- configMapRef:
    name: {{ include "gps-dagster.component" (list . "env") }}
{{- end -}}

{{/* Pod-level settings of a component: (list $ $componentValues). */}}
{{- define "gps-dagster.podPlacement" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- with ($c.nodeSelector | default $.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.tolerations | default $.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.affinity | default $.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $.Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Writable directories under a read-only root filesystem. */}}
{{- define "gps-dagster.scratchVolumes" -}}
- name: tmp
  emptyDir: {}
- name: dagster-home
  emptyDir: {}
{{- end -}}

{{- define "gps-dagster.scratchMounts" -}}
- name: tmp
  mountPath: /tmp
- name: dagster-home
  mountPath: {{ .Values.global.dagsterHome }}
{{- end -}}

{{/* The adapter's rules, read from files/adapter-rbac.yaml (gps_dagster/backends/k8s/rbac.yaml,
     the one list of what the adapter may do): role name -> rules, as JSON. */}}
{{- define "gps-dagster.adapterRules" -}}
{{- $text := .Files.Get "files/adapter-rbac.yaml" -}}
{{- if not $text -}}
{{- fail "files/adapter-rbac.yaml is missing or empty: it must be gps_dagster/backends/k8s/rbac.yaml" -}}
{{- end -}}
{{- $rules := dict -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (hasKey $obj "rules") -}}
{{- $_ := set $rules $obj.metadata.name $obj.rules -}}
{{- end -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}

{{/* What every run pod gets, in dagster-k8s's snake_case config (K8sRunLauncher's config or
     the code location's container context): resources, security, scratch volumes, the
     database env, placement and the Job's TTL. */}}
{{- define "gps-dagster.runK8sConfig" -}}
container_config:
  env:
    - name: DAGSTER_PG_URL
      value_from:
        secret_key_ref:
          name: {{ include "gps-dagster.pgSecret" . }}
          key: {{ .Values.postgresql.secretKey }}
    - name: GPS_DB_URL
      value_from:
        secret_key_ref:
          name: {{ include "gps-dagster.pgSecret" . }}
          key: {{ .Values.postgresql.secretKey }}
    {{- with .Values.gps.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  resources:
    {{- toYaml .Values.runs.resources | nindent 4 }}
  security_context:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volume_mounts:
    - {name: tmp, mount_path: /tmp}
    - {name: dagster-home, mount_path: {{ .Values.global.dagsterHome | quote }}}
pod_spec_config:
  security_context:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  volumes:
    - {name: tmp, empty_dir: {}}
    - {name: dagster-home, empty_dir: {}}
  {{- with (.Values.runs.nodeSelector | default .Values.nodeSelector) }}
  node_selector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (.Values.runs.tolerations | default .Values.tolerations) }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
job_spec_config:
  ttl_seconds_after_finished: {{ .Values.runs.ttlSecondsAfterFinished }}
  backoff_limit: 0
{{- end -}}

{{/* existingDagster mode: what the existing release's K8sRunLauncher must give our run pods
     (the adapter's ServiceAccount, our env, the database), carried by the code location as
     its container context (`dagster api grpc --container-context`, DAGSTER_CONTAINER_CONTEXT). */}}
{{- define "gps-dagster.containerContext" -}}
k8s:
  service_account_name: {{ include "gps-dagster.adapterServiceAccountName" . | quote }}
  env_config_maps:
    - {{ include "gps-dagster.component" (list . "env") | quote }}
  {{- with .Values.runLauncher.config.k8sRunLauncher.envSecrets }}
  env_secrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  run_k8s_config:
    {{- include "gps-dagster.runK8sConfig" . | nindent 4 }}
{{- end -}}
