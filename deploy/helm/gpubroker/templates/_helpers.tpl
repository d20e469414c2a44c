{{/*
The objects' base name: the release name when it already contains the chart
name (release "gpubroker" gives "gpubroker", as in deploy/kubernetes), else
release-chart; fullnameOverride wins. 63 characters at most (DNS labels).
*/}}
{{- define "gpubroker.fullname" -}}
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

{{/* The agent's objects: <fullname>-agent. */}}
{{- define "gpubroker.agentName" -}}
{{- printf "%s-agent" (include "gpubroker.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpubroker.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries besides its selector labels. */}}
{{- define "gpubroker.commonLabels" -}}
app.kubernetes.io/part-of: gpubroker
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ include "gpubroker.chart" . }}
{{- end -}}

{{/* The broker's selector labels (immutable in a Deployment: keep them few). */}}
{{- define "gpubroker.selectorLabels" -}}
app.kubernetes.io/name: gpubroker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpubroker.labels" -}}
{{ include "gpubroker.selectorLabels" . }}
{{ include "gpubroker.commonLabels" . }}
{{- end -}}

{{- define "gpubroker.agentSelectorLabels" -}}
app.kubernetes.io/name: gpubroker-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpubroker.agentLabels" -}}
{{ include "gpubroker.agentSelectorLabels" . }}
{{ include "gpubroker.commonLabels" . }}
{{- end -}}

{{- define "gpubroker.image" -}}
{{- printf "%s:%s" .image.repository (default .chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "gpubroker.databaseSecret" -}}
{{- default (printf "%s-database" (include "gpubroker.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{- define "gpubroker.agentTokenSecret" -}}
{{- default (printf "%s-token" (include "gpubroker.agentName" .)) .Values.agent.existingSecret -}}
{{- end -}}

{{/* The API's port: the one in config api.listen (":8080"). */}}
{{- define "gpubroker.apiPort" -}}
{{- $listen := dig "api" "listen" ":8080" .Values.config -}}
{{- $port := regexFind "[0-9]+$" (toString $listen) -}}
{{- if not $port -}}
{{- fail (printf "config.api.listen %q names no port: write it as \":8080\" or \"0.0.0.0:8080\"" $listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/*
The broker's configuration: .Values.config, plus api.tls and yarn.kerberos
pointing at the mounted Secrets when those are enabled.
*/}}
{{- define "gpubroker.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if .Values.tls.enabled -}}
{{- $api := default (dict) (get $cfg "api") -}}
{{- $_ := set $api "tls" (dict "cert_file" "/etc/gpubroker/tls/tls.crt" "key_file" "/etc/gpubroker/tls/tls.key" "client_ca_file" "/etc/gpubroker/tls/ca.crt") -}}
{{- $_ := set $cfg "api" $api -}}
{{- end -}}
{{- if and .Values.agent.enabled (eq .Values.agent.auth "serviceAccount") -}}
{{- $api := default (dict) (get $cfg "api") -}}
{{- $_ := set $api "agent_service_accounts" (list (printf "%s/%s" .Release.Namespace (include "gpubroker.agentName" .))) -}}
{{- $_ := set $cfg "api" $api -}}
{{- end -}}
{{- if .Values.kerberos.enabled -}}
{{- $yarn := default (dict) (get $cfg "yarn") -}}
{{- $krb := dict "principal" (required "kerberos.principal is required with kerberos.enabled: the broker's principal, e.g. gpubroker@EXAMPLE.COM" .Values.kerberos.principal) "keytab" "/etc/gpubroker/kerberos/gpubroker.keytab" "krb5_conf" "/etc/krb5.conf" -}}
{{- range $value, $field := dict "servicePrincipal" "service_principal" "rmPrincipal" "rm_principal" "namenodePrincipal" "namenode_principal" -}}
{{- with index $.Values.kerberos $value -}}
{{- $_ := set $krb $field . -}}
{{- end -}}
{{- end -}}
{{- $_ := set $yarn "kerberos" $krb -}}
{{- $_ := set $cfg "yarn" $yarn -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
