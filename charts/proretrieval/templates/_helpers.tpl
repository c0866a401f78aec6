{{/* Name of the chart, or nameOverride. */}}
{{- define "proretrieval.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, or fullnameOverride; the release name alone when it already holds the chart name. */}}
{{- define "proretrieval.fullname" -}}
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

{{/* Labels of every object; call with (dict "ctx" $ "component" "reward"). */}}
{{- define "proretrieval.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: proretrieval
{{ include "proretrieval.selectorLabels" . }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component; call with (dict "ctx" $ "component" "reward"). */}}
{{- define "proretrieval.selectorLabels" -}}
app.kubernetes.io/name: {{ include "proretrieval.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Object name of a component: <fullname>-<component>. */}}
{{- define "proretrieval.componentName" -}}
{{- printf "%s-%s" (include "proretrieval.fullname" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The project's image reference. */}}
{{- define "proretrieval.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* prore's global options: workspace, stores and embedder (given after the command, as prore allows). */}}
{{- define "proretrieval.globalArgs" -}}
- --workspace=/workspace
- --embedder={{ .Values.embedder }}
{{- with .Values.stores.clickhouseUrl }}
- --clickhouse-url={{ . }}
{{- end }}
{{- with .Values.stores.milvusUri }}
- --milvus-uri={{ . }}
{{- end }}
{{- end -}}

{{/* Environment of the project's containers. */}}
{{- define "proretrieval.env" -}}
- name: PRORE_WORKSPACE
  value: /workspace
- name: HOME
  value: /tmp
- name: HF_HOME
  value: /tmp/hf
- name: HF_HUB_OFFLINE
  value: "1"
- name: TOKENIZERS_PARALLELISM
  value: "false"
{{- end -}}

{{/* Store credentials as variables from a named Secret (each key optional), never as values: call with the
Secret's name; an empty name gives nothing. The keys are indexing.stores.credentials.ENV_KEYS. */}}
{{- define "proretrieval.credentialsEnv" -}}
{{- $secret := . -}}
{{- if $secret }}
{{- range list "CLICKHOUSE_USER" "CLICKHOUSE_PASSWORD" "MILVUS_USER" "MILVUS_PASSWORD" "MILVUS_TOKEN" }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
      optional: true
{{- end }}
{{- end }}
{{- end -}}

{{/* Volumes of the project's pods: the workspace claim and a writable /tmp (the root filesystem is read-only). */}}
{{- define "proretrieval.volumes" -}}
- name: workspace
  persistentVolumeClaim:
    claimName: {{ .Values.workspace.claimName }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "proretrieval.volumeMounts" -}}
- name: workspace
  mountPath: /workspace
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* HTTP probes on /readyz and /healthz of a port. */}}
{{- define "proretrieval.probes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 20
  failureThreshold: 3
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 10
  failureThreshold: 60
{{- end -}}
