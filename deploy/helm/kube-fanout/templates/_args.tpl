{{/*
The container's command-line flags. The TLS and auth flags are the names
issue 9 (security) gives kube-fanout; the others exist today
(server/src/config.rs). Only values that are set are passed, so the
binary's own defaults stay the defaults.
*/}}
{{- define "kube-fanout.args" -}}
{{- range .Values.servedResources }}
- {{ printf "--resource=%v" . | quote }}
{{- end }}
{{- range .Values.onDemand.resources }}
- {{ printf "--on-demand-resources=%v" . | quote }}
{{- end }}
{{- with .Values.onDemand.maxTypes }}
- {{ printf "--on-demand-max-types=%v" (int64 .) | quote }}
{{- end }}
{{- with .Values.onDemand.idleSeconds }}
- {{ printf "--on-demand-idle-seconds=%v" (int64 .) | quote }}
{{- end }}
{{- range .Values.indexFields }}
{{- if and (not (has (first (splitList "=" .)) $.Values.servedResources)) (not $.Values.onDemand.resources) }}
{{- fail (printf "indexFields: %v: the type is not in servedResources" .) }}
{{- end }}
- {{ printf "--index-field=%v" . | quote }}
{{- end }}
- {{ printf "--listen=%v" (include "kube-fanout.hostPort" (list .Values.listen.host .Values.listen.grpcPort)) | quote }}
- {{ printf "--metrics-listen=%v" (include "kube-fanout.hostPort" (list .Values.listen.metricsHost .Values.listen.metricsPort)) | quote }}
{{- if eq (include "kube-fanout.probeMode" .) "grpcHealthPort" }}
- {{ printf "--health-listen=%v" (include "kube-fanout.hostPort" (list .Values.listen.metricsHost .Values.listen.healthPort)) | quote }}
{{- end }}
{{- with .Values.config }}
{{- if .logJson }}
- "--log-json"
{{- end }}
{{- if .noWatchList }}
- "--no-watch-list"
{{- end }}
{{- if .keepManagedFields }}
- "--keep-managed-fields"
{{- end }}
{{- $numeric := dict "historyEvents" "history-events" "historySeconds" "history-seconds" "progressBookmarkSeconds" "progress-bookmark-seconds" "maxLagEvents" "max-lag-events" "maxLagBytes" "max-lag-bytes" "freshnessTimeoutMs" "freshness-timeout-ms" "minSendIntervalMs" "min-send-interval-ms" "maxConnectionAgeSeconds" "max-connection-age-seconds" "shutdownGraceSeconds" "shutdown-grace-seconds" "keepaliveSeconds" "keepalive-seconds" "keepaliveTimeoutSeconds" "keepalive-timeout-seconds" "pageSize" "page-size" "minWatchTimeoutSeconds" "min-watch-timeout-seconds" "maxInternalErrorRetrySeconds" "max-internal-error-retry-seconds" "unreadyAfterSeconds" "unready-after-seconds" "maxConcurrentStreams" "max-concurrent-streams" "maxHeaderListBytes" "max-header-list-bytes" "tlsHandshakeTimeoutSeconds" "tls-handshake-timeout-seconds" "maxConnections" "max-connections" "maxConnectionsPerIp" "max-connections-per-ip" "unauthenticatedConnectionTimeoutSeconds" "unauthenticated-connection-timeout-seconds" "maxListBytes" "max-list-bytes" "maxListBytesInFlight" "max-list-bytes-in-flight" "maxSharedSnapshotBytes" "max-shared-snapshot-bytes" "authTokenReviewRate" "auth-token-review-rate" "authTokenReviewBurst" "auth-token-review-burst" "authTokenReviewConcurrency" "auth-token-review-concurrency" "authTokenReviewRatePerSource" "auth-token-review-rate-per-source" "authTokenReviewBurstPerSource" "auth-token-review-burst-per-source" "authTokenReviewConcurrencyPerSource" "auth-token-review-concurrency-per-source" }}
{{- range $key := keys $numeric | sortAlpha }}
{{- $value := get $.Values.config $key }}
{{- if not (kindIs "invalid" $value) }}
- {{ printf "--%v=%v" (get $numeric $key) (int64 $value) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.tls.enabled }}
- "--tls-cert-file=/etc/kube-fanout/tls/tls.crt"
- "--tls-private-key-file=/etc/kube-fanout/tls/tls.key"
{{- if or .Values.tls.clientCA.existingSecret .Values.tls.clientCA.existingConfigMap }}
- "--client-ca-file=/etc/kube-fanout/client-ca/ca.crt"
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- with .Values.auth.tokenAudiences }}
- {{ printf "--auth-token-audiences=%v" (join "," .) | quote }}
{{- end }}
{{- if not .Values.auth.metrics }}
- "--metrics-auth=none"
{{- end }}
{{- if .Values.auth.insecureAllowUnauthenticated }}
- "--insecure-allow-unauthenticated"
{{- end }}
{{- else }}
- "--auth=none"
{{- if .Values.auth.insecureAllowUnauthenticated }}
- "--insecure-allow-unauthenticated"
{{- end }}
{{- end }}
{{- if ne .Values.audit.level "none" }}
- {{ printf "--audit-level=%v" .Values.audit.level | quote }}
- {{ printf "--audit-max-lines-per-second=%v" (int64 .Values.audit.maxLinesPerSecond) | quote }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
