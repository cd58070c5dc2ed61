{{/* Names and labels, as `helm create` lays them out. */}}

{{- define "kube-fanout.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "kube-fanout.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kube-fanout.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-fanout.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-fanout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kube-fanout.labels" -}}
helm.sh/chart: {{ include "kube-fanout.chart" . }}
{{ include "kube-fanout.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kube-fanout.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-fanout.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kube-fanout.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Where the serving certificate comes from, with TLS on: existingSecret,
certManager, or generated (by the chart, templates/tls.yaml).
*/}}
{{- define "kube-fanout.tlsSource" -}}
{{- if .Values.tls.existingSecret }}existingSecret
{{- else if .Values.tls.certManager.enabled }}certManager
{{- else }}generated
{{- end }}
{{- end }}

{{/* The Secret holding the serving certificate. */}}
{{- define "kube-fanout.tlsSecretName" -}}
{{- if .Values.tls.existingSecret }}
{{- .Values.tls.existingSecret }}
{{- else }}
{{- printf "%s-tls" (include "kube-fanout.fullname" .) }}
{{- end }}
{{- end }}

{{/* The ConfigMap publishing a generated certificate's CA (ca.crt). */}}
{{- define "kube-fanout.caConfigMapName" -}}
{{- printf "%s-ca" (include "kube-fanout.fullname" .) }}
{{- end }}

{{/*
A projected volume source with the CA as ca.crt: the ConfigMap with a
generated certificate, else the serving Secret's ca.crt.
*/}}
{{- define "kube-fanout.caSource" -}}
{{- if eq (include "kube-fanout.tlsSource" .) "generated" }}
configMap:
  name: {{ include "kube-fanout.caConfigMapName" . }}
  items:
    - key: ca.crt
      path: ca.crt
{{- else }}
secret:
  name: {{ include "kube-fanout.tlsSecretName" . }}
  items:
    - key: ca.crt
      path: ca.crt
{{- end }}
{{- end }}

{{/* The serving certificate's DNS names: the Service's (and the
node-local tier's, when on), and any extra. */}}
{{- define "kube-fanout.dnsNames" -}}
{{- $names := list (include "kube-fanout.fullname" .) (printf "%s.%s" (include "kube-fanout.fullname" .) .Release.Namespace) (include "kube-fanout.serviceHost" .) (printf "%s.cluster.local" (include "kube-fanout.serviceHost" .)) }}
{{- if .Values.nodeLocal.enabled }}
{{- $local := printf "%s.%s.svc" (include "kube-fanout.nodeLocalName" .) .Release.Namespace }}
{{- $names = concat $names (list $local (printf "%s.cluster.local" $local)) }}
{{- end }}
{{- toJson (concat $names .Values.tls.extraDnsNames) }}
{{- end }}

{{/* The audience of the token a client in the cluster sends ("" if none). */}}
{{- define "kube-fanout.clientAudience" -}}
{{- with .Values.auth.tokenAudiences }}{{ first . }}{{ end }}
{{- end }}

{{/* The Service's in-cluster DNS name. */}}
{{- define "kube-fanout.serviceHost" -}}
{{- printf "%s.%s.svc" (include "kube-fanout.fullname" .) .Release.Namespace }}
{{- end }}

{{/* "true" when the gRPC server binds a loopback address only. */}}
{{- define "kube-fanout.loopback" -}}
{{- include "kube-fanout.isLoopback" .Values.listen.host }}
{{- end }}

{{/* "true" when the metrics server binds a loopback address only. */}}
{{- define "kube-fanout.metricsLoopback" -}}
{{- include "kube-fanout.isLoopback" .Values.listen.metricsHost }}
{{- end }}

{{/* "true" when the host (an address to bind) is loopback. */}}
{{- define "kube-fanout.isLoopback" -}}
{{- if or (hasPrefix "127." .) (eq . "::1") (eq . "localhost") }}true{{ end }}
{{- end }}

{{/* host:port for a listener, with IPv6 hosts in brackets. */}}
{{- define "kube-fanout.hostPort" -}}
{{- $host := index . 0 }}
{{- if contains ":" $host }}{{ printf "[%s]:%v" $host (index . 1) }}{{ else }}{{ printf "%s:%v" $host (index . 1) }}{{ end }}
{{- end }}

{{/*
The served resources parsed into API groups: a dict from group ("" for the
core group, "*" for every group) to its resources ("*" for every resource of
the group), for the ClusterRole: the configured types (servedResources) and
the on-demand allow-list (onDemand.resources: GROUP/RESOURCE, GROUP/* or *,
the core group spelt core). The schema has already checked each entry's form.
*/}}
{{- define "kube-fanout.rbacGroups" -}}
{{- $groups := dict }}
{{- range .Values.servedResources }}
{{- $parts := splitList "/" . }}
{{- $group := "" }}
{{- if eq (len $parts) 3 }}{{ $group = index $parts 0 }}{{ end }}
{{- $resource := last $parts }}
{{- $_ := set $groups $group (append (get $groups $group | default list) $resource | uniq) }}
{{- end }}
{{- range .Values.onDemand.resources }}
{{- $group := "*" }}
{{- $resource := "*" }}
{{- if ne . "*" }}
{{- $group = first (splitList "/" .) }}
{{- $resource = last (splitList "/" .) }}
{{- if eq $group "core" }}{{ $group = "" }}{{ end }}
{{- end }}
{{- $_ := set $groups $group (append (get $groups $group | default list) $resource | uniq) }}
{{- end }}
{{- /* A group with every resource needs no other entry. */}}
{{- range $group, $resources := $groups }}
{{- if has "*" $resources }}{{ $_ := set $groups $group (list "*") }}{{ end }}
{{- end }}
{{- toJson $groups }}
{{- end }}

{{/* Refuses combinations the schema cannot explain readably. */}}
{{- define "kube-fanout.validate" -}}
{{- if and (not .Values.servedResources) (not .Values.onDemand.resources) }}
{{- fail "servedResources and onDemand.resources are both empty: kube-fanout would serve nothing" }}
{{- end }}
{{- $grpc := include "kube-fanout.hostPort" (list .Values.listen.host .Values.listen.grpcPort) }}
{{- $metrics := include "kube-fanout.hostPort" (list .Values.listen.metricsHost .Values.listen.metricsPort) }}
{{- $offLoopback := or (not (include "kube-fanout.loopback" .)) (not (include "kube-fanout.metricsLoopback" .)) }}
{{- if and .Values.tls.existingSecret .Values.tls.certManager.enabled }}
{{- fail "tls.existingSecret and tls.certManager.enabled are alternatives: set one" }}
{{- end }}
{{- if and .Values.nodeLocal.enabled .Values.onDemand.resources }}
{{- fail "nodeLocal.enabled: a leaf serves the types it is started with; onDemand.resources cannot be served by the node-local tier" }}
{{- end }}
{{- if and .Values.nodeLocal.enabled .Values.auth.enabled (not .Values.tls.enabled) }}
{{- fail "nodeLocal.enabled with auth on needs TLS: each leaf shows the replicas a token, which plaintext would give away to anyone on the network" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name (an Issuer or ClusterIssuer)" }}
{{- end }}
{{- if and (or .Values.tls.existingSecret .Values.tls.certManager.enabled) (not .Values.tls.enabled) }}
{{- fail "a TLS certificate is configured (tls.existingSecret or tls.certManager) but tls.enabled is false" }}
{{- end }}
{{- with .Values.traces.tls }}
{{- if and .ca.existingSecret .ca.existingConfigMap }}
{{- fail "traces.tls.ca.existingSecret and traces.tls.ca.existingConfigMap are alternatives: set one" }}
{{- end }}
{{- if and (or .ca.existingSecret .ca.existingConfigMap .clientCertificateSecret) (not (hasPrefix "https://" $.Values.traces.endpoint)) }}
{{- fail (printf "traces.tls is set but traces.endpoint %q is not https://: the exporter would speak plaintext and never use it" $.Values.traces.endpoint) }}
{{- end }}
{{- end }}
{{- if and .Values.tls.clientCA.existingSecret .Values.tls.clientCA.existingConfigMap }}
{{- fail "tls.clientCA.existingSecret and tls.clientCA.existingConfigMap are alternatives: set one" }}
{{- end }}
{{- if and (or .Values.tls.clientCA.existingSecret .Values.tls.clientCA.existingConfigMap) (not .Values.tls.enabled) }}
{{- fail "tls.clientCA (mTLS) needs tls.enabled" }}
{{- end }}
{{- if and (not .Values.tls.enabled) $offLoopback (not .Values.tls.insecurePlaintext) }}
{{- fail (printf "tls.enabled=false would serve plaintext on %s and %s, where bearer tokens and every object can be read and replayed by anyone on the network: keep TLS on (a generated certificate by default, or tls.existingSecret, or tls.certManager), bind listen.host and listen.metricsHost to loopback, or set tls.insecurePlaintext=true" $grpc $metrics) }}
{{- end }}
{{- if and .Values.tls.insecurePlaintext .Values.tls.enabled }}
{{- fail "tls.insecurePlaintext only applies with tls.enabled=false" }}
{{- end }}
{{- if and (not .Values.auth.enabled) $offLoopback (not .Values.auth.insecureAllowUnauthenticated) }}
{{- fail (printf "auth.enabled=false would serve every object to anyone who reaches %s (and the metrics on %s): allowed only with listen.host and listen.metricsHost on loopback (127.0.0.1, ::1) or with auth.insecureAllowUnauthenticated=true" $grpc $metrics) }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.metrics) (not (include "kube-fanout.metricsLoopback" .)) (not .Values.auth.insecureAllowUnauthenticated) }}
{{- fail (printf "auth.metrics=false would serve the metrics to anyone who reaches %s: allowed only with listen.metricsHost on loopback or with auth.insecureAllowUnauthenticated=true" $metrics) }}
{{- end }}
{{- if and .Values.tls.enabled (has .Values.listen.healthPort (list .Values.listen.grpcPort .Values.listen.metricsPort)) }}
{{- fail (printf "listen.healthPort %v is also the gRPC or metrics port: with TLS on, the plaintext health listener needs a port of its own" .Values.listen.healthPort) }}
{{- end }}
{{- if and (ne .Values.audit.level "none") (not .Values.auth.enabled) }}
{{- fail (printf "audit.level=%v needs auth.enabled: with auth off no caller is authenticated or authorized, so there is nothing to audit" .Values.audit.level) }}
{{- end }}
{{- if and .Values.auth.insecureAllowUnauthenticated .Values.auth.enabled .Values.auth.metrics }}
{{- fail "auth.insecureAllowUnauthenticated only applies with auth.enabled=false or auth.metrics=false" }}
{{- end }}
{{- end }}

{{/*
The effective probe mode: grpc, grpcHealthPort (gRPC probes on the
plaintext health listener, the default with TLS: the kubelet's gRPC probe
speaks plaintext only), grpcTLS, tcp, or none (loopback).
*/}}
{{- define "kube-fanout.probeMode" -}}
{{- if include "kube-fanout.loopback" . }}none
{{- else if and .Values.tls.enabled (has .Values.probes.mode (list "auto" "grpc")) }}grpcHealthPort
{{- else if ne .Values.probes.mode "auto" }}{{ .Values.probes.mode }}
{{- else }}grpc
{{- end }}
{{- end }}

{{/*
A probe on the gRPC port. Readiness asks for kubefanout.v1.KubeFanout,
SERVING once every resource type has synced; liveness asks for "", SERVING
while the server runs (so a pod that cannot reach the API server is taken
out of the Service, not restarted in a loop).
*/}}
{{- define "kube-fanout.probe" -}}
{{- $root := index . 0 }}
{{- $service := index . 1 }}
{{- $mode := include "kube-fanout.probeMode" $root }}
{{- if eq $mode "tcp" }}
tcpSocket:
  port: grpc
{{- else }}
grpc:
  port: {{ eq $mode "grpcHealthPort" | ternary $root.Values.listen.healthPort $root.Values.listen.grpcPort }}
  service: {{ $service | quote }}
  {{- if eq $mode "grpcTLS" }}
  mode: TLS
  {{- end }}
{{- end }}
{{- end }}

{{/* The node-local tier's selector labels: a name of its own, so that
neither the Deployment, the Service, the PodDisruptionBudget nor the
NetworkPolicy of the replicas selects its pods. */}}
{{- define "kube-fanout.nodeLocalSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-node-local" (include "kube-fanout.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-local
{{- end }}

{{/* A pod's labels by role (list root role): "replica" or "nodeLocal". */}}
{{- define "kube-fanout.roleLabels" -}}
{{- $root := index . 0 }}
{{- if eq (index . 1) "replica" }}
{{- include "kube-fanout.labels" $root }}
{{- else -}}
helm.sh/chart: {{ include "kube-fanout.chart" $root }}
{{ include "kube-fanout.nodeLocalSelectorLabels" $root }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- end }}
{{- end }}

{{/* The node-local tier's Service name and in-cluster DNS name. */}}
{{- define "kube-fanout.nodeLocalName" -}}
{{- printf "%s-node-local" (include "kube-fanout.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "true" when the replicas start from each other's snapshots: more
than one, and a token to show each other that is not sent in plaintext
(with TLS off and auth on they list, as before). */}}
{{- define "kube-fanout.bootstraps" -}}
{{- if and .Values.bootstrapFromPeers.enabled (gt (int .Values.replicaCount) 1) (or .Values.tls.enabled (not .Values.auth.enabled)) }}true{{ end }}
{{- end }}

{{/* The replicas' Service as another kube-fanout's upstream
(replicasAddress when set). */}}
{{- define "kube-fanout.peerAddress" -}}
{{- if .Values.replicasAddress }}
{{- .Values.replicasAddress }}
{{- else }}
{{- printf "%s://%s:%v" (ternary "https" "http" .Values.tls.enabled) (include "kube-fanout.serviceHost" .) .Values.service.grpcPort }}
{{- end }}
{{- end }}

{{/* The CA and token flags for reaching the replicas (see _pod.tpl's
peer volume). */}}
{{- define "kube-fanout.peerArgs" -}}
{{- if .Values.tls.enabled }}
- "--peer-ca-file=/etc/kube-fanout/peer/ca.crt"
- {{ printf "--peer-tls-server-name=%v" (include "kube-fanout.serviceHost" .) | quote }}
{{- end }}
{{- if .Values.auth.enabled }}
- "--peer-token-file=/etc/kube-fanout/peer/token"
{{- end }}
{{- end }}

{{/* A pod's flags by role (list root role): the replicas' bootstrap from
each other, or a leaf's upstream. */}}
{{- define "kube-fanout.roleArgs" -}}
{{- $root := index . 0 }}
{{- include "kube-fanout.args" $root }}
{{- if eq (index . 1) "nodeLocal" }}
- {{ printf "--upstream-fanout=%v" (include "kube-fanout.peerAddress" $root) | quote }}
{{- include "kube-fanout.peerArgs" $root }}
{{- else if include "kube-fanout.bootstraps" $root }}
- {{ printf "--bootstrap-from=%v" (include "kube-fanout.peerAddress" $root) | quote }}
- {{ printf "--bootstrap-timeout-seconds=%v" (int64 $root.Values.bootstrapFromPeers.timeoutSeconds) | quote }}
{{- include "kube-fanout.peerArgs" $root }}
{{- end }}
{{- end }}
