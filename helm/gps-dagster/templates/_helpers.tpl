{{- /*
Decisions embodied here (docs/decisions.md):
* “The chart's adapter RBAC is rendered from rbac.yaml”
* “The database URL comes from one existing Secret”
* “Existing-Dagster mode carries the run pods' settings as the code location's container context”
* “The chart on the real node runs on the host network”
* “One ServiceAccount per component; the code location only reads, plus holder clean-up”
* “Run Jobs only in the release namespace”
* “Object names: the base is cut at 49 characters”
*/ -}}
{{/* Names and labels (the official Dagster chart's conventions). */}}
{{- define "gps-dagster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The base of every object name, cut to 49 characters so that the longest component name
     (<base>-code-location) still fits a 63-character DNS label: cutting the whole name instead
     made two components of a long release name collide. */}}
{{- define "gps-dagster.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 49 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 49 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 49 | trimSuffix "-" -}}
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

{{/* repository@digest when image.digest is set (immutable), else repository:tag. */}}
{{- define "gps-dagster.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The product's identities (SPEC R-K8S-6), each with only the roles its work needs:
     serviceAccount key -> the adapter roles (gps_dagster/backends/k8s/rbac.yaml) it is bound to.
     * engine, api (apply-now runs a pass) and runs (the transition Jobs) read, scale, render
       and manage holder pods;
     * codeLocation (sensors: passes that open plans and observe steps, never execute them)
       reads, and deletes a holder when it sees the start that readied a member converge. */}}
{{- define "gps-dagster.identities" -}}
{{- $writer := list "capacity" "deploys-read" "deploys-write" "holders" "policy" -}}
{{- $out := dict "codeLocation" (list "capacity" "deploys-read" "holder-cleanup") "runs" $writer -}}
{{- if .Values.engine.enabled -}}{{- $_ := set $out "engine" $writer -}}{{- end -}}
{{- if .Values.api.enabled -}}{{- $_ := set $out "api" $writer -}}{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "gps-dagster.identityComponent" -}}
{{- get (dict "engine" "engine" "codeLocation" "code-location" "api" "api" "runs" "runs") . -}}
{{- end -}}

{{/* The ServiceAccount name of one identity: (list $ "engine"). */}}
{{- define "gps-dagster.serviceAccountName" -}}
{{- $ := index . 0 -}}
{{- $key := index . 1 -}}
{{- $sa := index $.Values.serviceAccount $key -}}
{{- if $sa.create -}}
{{- default (include "gps-dagster.component" (list $ (include "gps-dagster.identityComponent" $key))) $sa.name -}}
{{- else -}}
{{- required (printf "serviceAccount.%s.name is required when serviceAccount.%s.create is false" $key $key) $sa.name -}}
{{- end -}}
{{- end -}}

{{/* The workload namespaces: required, unless rbac.clusterWide is explicitly true. */}}
{{- define "gps-dagster.scope" -}}
{{- $r := .Values.rbac -}}
{{- if and $r.clusterWide $r.namespaces -}}
{{- fail "rbac.namespaces and rbac.clusterWide=true exclude each other: list the namespaces of the workloads (recommended) or set rbac.clusterWide=true with rbac.namespaces empty" -}}
{{- end -}}
{{- if not (or $r.clusterWide $r.namespaces) -}}
{{- fail "rbac.namespaces is required: list the namespaces of the workloads gps-dagster schedules (e.g. --set 'rbac.namespaces={serving,cmp-team}'); rbac.clusterWide=true grants every namespace instead" -}}
{{- end -}}
{{- range $ns := $r.reservationNamespaces -}}
{{- if and (not $r.clusterWide) (not (has $ns $r.namespaces)) -}}
{{- fail (printf "rbac.reservationNamespaces: %s is not in rbac.namespaces: a reservation's members run in its namespace, add it there too" $ns) -}}
{{- end -}}
{{- end -}}
{{- toJson $r.namespaces -}}
{{- end -}}

{{- define "gps-dagster.runLauncherServiceAccountName" -}}
{{- if .Values.serviceAccount.runLauncher.create -}}
{{- default (include "gps-dagster.component" (list . "run-launcher")) .Values.serviceAccount.runLauncher.name -}}
{{- else -}}
{{- required "serviceAccount.runLauncher.name is required when serviceAccount.runLauncher.create is false" .Values.serviceAccount.runLauncher.name -}}
{{- end -}}
{{- end -}}


{{- define "gps-dagster.full" -}}
{{- if .Values.existingDagster.enabled -}}{{- else -}}true{{- end -}}
{{- end -}}

{{- define "gps-dagster.codeLocationHost" -}}
{{- include "gps-dagster.component" (list . "code-location") -}}
{{- end -}}

{{- define "gps-dagster.apiTokenSecret" -}}
{{- $t := .Values.api.adminToken -}}
{{- if and .Values.api.enabled (not (or $t.create $t.existingSecret)) -}}
{{- fail "api.adminToken.existingSecret is required while the API is enabled: create a Secret with key `token` (gpsd_<12 hex>_<43 letters/digits>, see values.yaml) and name it, or set api.adminToken.create=true for a helm-CLI install (a generated token is rotated by every `helm template` / GitOps render)" -}}
{{- end -}}
{{- $t.existingSecret | default (include "gps-dagster.component" (list . "api-token")) -}}
{{- end -}}

{{/* Run Jobs only in the release namespace: their ServiceAccount, ConfigMaps and the database
     Secret exist only there. */}}
{{- define "gps-dagster.jobNamespace" -}}
{{- $ns := .Values.runLauncher.config.k8sRunLauncher.jobNamespace -}}
{{- if and $ns (ne $ns .Release.Namespace) -}}
{{- fail (printf "runLauncher.config.k8sRunLauncher.jobNamespace: %s is not the release namespace %s: run Jobs need the runs ServiceAccount, the instance and env ConfigMaps and the database Secret, which live only in the release namespace; leave it empty (or install the release in %s)" $ns .Release.Namespace $ns) -}}
{{- end -}}
{{- .Release.Namespace -}}
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
{{- if $.Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
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
  {{- if .Values.hostNetwork }}
  host_network: true
  dns_policy: ClusterFirstWithHostNet
  {{- end }}
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
  service_account_name: {{ include "gps-dagster.serviceAccountName" (list . "runs") | quote }}
  env_config_maps:
    - {{ include "gps-dagster.component" (list . "env") | quote }}
  {{- with .Values.runLauncher.config.k8sRunLauncher.envSecrets }}
  env_secrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  run_k8s_config:
    {{- include "gps-dagster.runK8sConfig" . | nindent 4 }}
{{- end -}}

{{/* Scheduling of a component's pods: its priorityClassName and topology spread, each spread
     constraint selecting the component's own pods. Called with (list $ $values "component"). */}}
{{- define "gps-dagster.scheduling" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- $name := index . 2 -}}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  - {{ toYaml . | nindent 4 | trim }}
    labelSelector:
      matchLabels:
        {{- include "gps-dagster.componentSelector" (list $ $name) | nindent 8 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* dagster.yaml's compute_logs from computeLogManager (values.yaml lists the choices). */}}
{{- define "gps-dagster.computeLogs" -}}
{{- $m := .Values.computeLogManager -}}
{{- if eq $m.type "NoOpComputeLogManager" -}}
module: dagster._core.storage.noop_compute_log_manager
class: NoOpComputeLogManager
{{- else if eq $m.type "LocalComputeLogManager" -}}
module: dagster._core.storage.local_compute_log_manager
class: LocalComputeLogManager
config:
  base_dir: {{ $m.localBaseDir | quote }}
{{- else if eq $m.type "custom" -}}
{{- if not (and $m.custom.module $m.custom.class) -}}
{{- fail "computeLogManager.custom: module and class are required when computeLogManager.type is custom" -}}
{{- end -}}
module: {{ $m.custom.module }}
class: {{ $m.custom.class }}
{{- with $m.custom.config }}
config:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- else -}}
{{- fail (printf "computeLogManager.type: %q is not NoOpComputeLogManager, LocalComputeLogManager or custom" $m.type) -}}
{{- end -}}
{{- end -}}

{{/* The storage part of dagster.yaml: all the migrate hook needs (`dagster instance migrate`
     also loads the run launcher, and K8sRunLauncher needs cluster credentials the hook has not). */}}
{{- define "gps-dagster.instanceStorageYaml" -}}
telemetry:
  enabled: false
nux:
  enabled: false

# Runs, event logs and schedules in PostgreSQL. The URL must use the postgresql+psycopg2
# driver (FACTS.md: under psycopg 3 LISTEN/NOTIFY fails and runs stay NOT_STARTED).
storage:
  postgres:
    postgres_url:
      env: DAGSTER_PG_URL
{{- end -}}

{{/* dagster.yaml of the Dagster instance (the instance ConfigMap). */}}
{{- define "gps-dagster.instanceYaml" -}}
{{- $k8s := .Values.runLauncher.config.k8sRunLauncher -}}
{{ include "gps-dagster.instanceStorageYaml" . }}

scheduler:
  module: dagster._core.scheduler
  class: DagsterDaemonScheduler

run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: {{ .Values.dagsterDaemon.runCoordinator.dequeueIntervalSeconds }}

concurrency:
  runs:
    max_concurrent_runs: {{ .Values.dagsterDaemon.runCoordinator.maxConcurrentRuns }}

run_launcher:
  module: dagster_k8s
  class: K8sRunLauncher
  config:
    load_incluster_config: {{ $k8s.loadInclusterConfig }}
    {{- with $k8s.kubeconfigFile }}
    kubeconfig_file: {{ . | quote }}
    {{- end }}
    job_namespace: {{ include "gps-dagster.jobNamespace" . | quote }}
    job_image: {{ include "gps-dagster.image" . | quote }}
    image_pull_policy: {{ $k8s.imagePullPolicy }}
    {{- with .Values.imagePullSecrets }}
    image_pull_secrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    service_account_name: {{ include "gps-dagster.serviceAccountName" (list . "runs") | quote }}
    dagster_home: {{ .Values.global.dagsterHome | quote }}
    instance_config_map: {{ include "gps-dagster.component" (list . "instance") | quote }}
    env_config_maps:
      - {{ include "gps-dagster.component" (list . "env") | quote }}
      {{- range $k8s.envConfigMaps }}
      - {{ . | quote }}
      {{- end }}
    {{- with $k8s.envSecrets }}
    env_secrets:
      {{- range . }}
      - {{ . | quote }}
      {{- end }}
    {{- end }}
    {{- with $k8s.labels }}
    labels:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    run_k8s_config:
      {{- include "gps-dagster.runK8sConfig" . | nindent 6 }}

run_monitoring:
  enabled: true
  start_timeout_seconds: 300
  poll_interval_seconds: 30

compute_logs:
  {{- include "gps-dagster.computeLogs" . | nindent 2 }}

sensors:
  use_threads: true
  num_workers: {{ .Values.dagsterDaemon.sensors.numWorkers }}

schedules:
  use_threads: true
  num_workers: {{ .Values.dagsterDaemon.schedules.numWorkers }}
{{- end -}}

