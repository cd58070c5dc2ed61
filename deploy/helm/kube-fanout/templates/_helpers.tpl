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

{{/* The Secret holding the serving certificate. */}}
{{- define "kube-fanout.tlsSecretName" -}}
{{- if .Values.tls.certManager.enabled }}
{{- printf "%s-tls" (include "kube-fanout.fullname" .) }}
{{- else }}
{{- .Values.tls.existingSecret }}
{{- end }}
{{- end }}

{{/* The Service's in-cluster DNS name. */}}
{{- define "kube-fanout.serviceHost" -}}
{{- printf "%s.%s.svc" (include "kube-fanout.fullname" .) .Release.Namespace }}
{{- end }}

{{/* "true" when the gRPC server binds a loopback address only. */}}
{{- define "kube-fanout.loopback" -}}
{{- if or (hasPrefix "127." .Values.listen.host) (eq .Values.listen.host "::1") (eq .Values.listen.host "localhost") }}true{{ end }}
{{- end }}

{{/* host:port for a listener, with IPv6 hosts in brackets. */}}
{{- define "kube-fanout.hostPort" -}}
{{- $host := index . 0 }}
{{- if contains ":" $host }}{{ printf "[%s]:%v" $host (index . 1) }}{{ else }}{{ printf "%s:%v" $host (index . 1) }}{{ end }}
{{- end }}

{{/*
The served resources parsed into API groups: a dict from group ("" for the
core group) to its resources, for the ClusterRole. The schema has already
checked each entry's form.
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
{{- toJson $groups }}
{{- end }}

{{/* Refuses combinations the schema cannot explain readably. */}}
{{- define "kube-fanout.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (not .Values.tls.certManager.enabled) }}
{{- fail "tls.enabled needs a certificate: set tls.existingSecret to a kubernetes.io/tls Secret, or tls.certManager.enabled=true with tls.certManager.issuerRef.name" }}
{{- end }}
{{- if and .Values.tls.existingSecret .Values.tls.certManager.enabled }}
{{- fail "tls.existingSecret and tls.certManager.enabled are alternatives: set one" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name (an Issuer or ClusterIssuer)" }}
{{- end }}
{{- if and (or .Values.tls.existingSecret .Values.tls.certManager.enabled) (not .Values.tls.enabled) }}
{{- fail "a TLS certificate is configured (tls.existingSecret or tls.certManager) but tls.enabled is false" }}
{{- end }}
{{- if and .Values.tls.clientCA (not .Values.tls.enabled) }}
{{- fail "tls.clientCA (mTLS) needs tls.enabled" }}
{{- end }}
{{- if and (not .Values.auth.enabled) (not (include "kube-fanout.loopback" .)) (not .Values.auth.insecureAllowUnauthenticated) }}
{{- fail (printf "auth.enabled=false would serve every object to anyone who reaches %s: allowed only with listen.host on loopback (127.0.0.1, ::1) or with auth.insecureAllowUnauthenticated=true" (include "kube-fanout.hostPort" (list .Values.listen.host .Values.listen.grpcPort))) }}
{{- end }}
{{- if and .Values.tls.enabled (has .Values.listen.healthPort (list .Values.listen.grpcPort .Values.listen.metricsPort)) }}
{{- fail (printf "listen.healthPort %v is also the gRPC or metrics port: with TLS on, the plaintext health listener needs a port of its own" .Values.listen.healthPort) }}
{{- end }}
{{- if and .Values.auth.insecureAllowUnauthenticated .Values.auth.enabled }}
{{- fail "auth.insecureAllowUnauthenticated only applies with auth.enabled=false" }}
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
