{{/*
The pod template of the Deployment's replicas (role "replica") and of the
node-local tier's DaemonSet (role "nodeLocal"): one container, the same
flags but for where it is fed from (roleArgs), and the same certificate,
token and CA mounts. Called with (list root role).
*/}}
{{- define "kube-fanout.podTemplate" -}}
{{- $root := index . 0 }}
{{- $role := index . 1 }}
{{- with $root }}
{{- $clientCA := or .Values.tls.clientCA.existingSecret .Values.tls.clientCA.existingConfigMap }}
{{- $otlpCA := or .Values.traces.tls.ca.existingSecret .Values.traces.tls.ca.existingConfigMap }}
{{- $otlpClient := .Values.traces.tls.clientCertificateSecret }}
{{- $peer := or (eq $role "nodeLocal") (include "kube-fanout.bootstraps" .) }}
{{- $peer = and $peer (or .Values.auth.enabled .Values.tls.enabled) }}
{{- $mounts := or .Values.tls.enabled $otlpCA $otlpClient $peer -}}
template:
    metadata:
      annotations:
        # A change of flags rolls the pods even when nothing else changed.
        checksum/args: {{ include "kube-fanout.roleArgs" (list . $role) | sha256sum }}
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      labels:
        {{- include "kube-fanout.roleLabels" (list . $role) | nindent 8 }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "kube-fanout.serviceAccountName" . }}
      automountServiceAccountToken: true
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      {{- if and .Values.topologySpread.enabled (eq $role "replica") }}
      topologySpreadConstraints:
        {{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
        - maxSkew: 1
          topologyKey: {{ . }}
          whenUnsatisfiable: {{ $root.Values.topologySpread.whenUnsatisfiable }}
          labelSelector:
            matchLabels:
              {{- include "kube-fanout.selectorLabels" $root | nindent 14 }}
          matchLabelKeys:
            - pod-template-hash
        {{- end }}
      {{- end }}
      containers:
        - name: kube-fanout
          image: {{ include "kube-fanout.image" . | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          args:
            {{- include "kube-fanout.roleArgs" (list . $role) | trim | nindent 12 }}
          env:
            - name: RUST_LOG
              value: {{ .Values.config.logLevel | quote }}
            {{- with .Values.traces }}
            {{- if .endpoint }}
            - name: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
              value: {{ .endpoint | quote }}
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: OTEL_RESOURCE_ATTRIBUTES
              value: "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)"
            {{- if $otlpCA }}
            - name: OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE
              value: /etc/kube-fanout/otlp-ca/ca.crt
            {{- end }}
            {{- if $otlpClient }}
            - name: OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE
              value: /etc/kube-fanout/otlp-client/tls.crt
            - name: OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY
              value: /etc/kube-fanout/otlp-client/tls.key
            {{- end }}
            {{- with .sampler }}
            - name: OTEL_TRACES_SAMPLER
              value: {{ . | quote }}
            {{- end }}
            {{- with .samplerArg }}
            - name: OTEL_TRACES_SAMPLER_ARG
              value: {{ . | quote }}
            {{- end }}
            {{- end }}
            {{- end }}
            {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: grpc
              containerPort: {{ .Values.listen.grpcPort }}
              protocol: TCP
            - name: metrics
              containerPort: {{ .Values.listen.metricsPort }}
              protocol: TCP
            {{- if eq (include "kube-fanout.probeMode" .) "grpcHealthPort" }}
            - name: health
              containerPort: {{ .Values.listen.healthPort }}
              protocol: TCP
            {{- end }}
          {{- if ne (include "kube-fanout.probeMode" .) "none" }}
          readinessProbe:
            {{- include "kube-fanout.probe" (list . "kubefanout.v1.KubeFanout") | trim | nindent 12 }}
            periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
            failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
          livenessProbe:
            {{- include "kube-fanout.probe" (list . "") | trim | nindent 12 }}
            periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
            failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
          {{- end }}
          {{- if gt (int .Values.preStopSleepSeconds) 0 }}
          lifecycle:
            preStop:
              sleep:
                seconds: {{ .Values.preStopSleepSeconds }}
          {{- end }}
          resources:
            {{- toYaml (ternary .Values.resources .Values.nodeLocal.resources (eq $role "replica")) | nindent 12 }}
          securityContext:
            {{- toYaml .Values.securityContext | nindent 12 }}
          {{- if $mounts }}
          volumeMounts:
            {{- if $peer }}
            - name: peer
              mountPath: /etc/kube-fanout/peer
              readOnly: true
            {{- end }}
            {{- if .Values.tls.enabled }}
            - name: tls
              mountPath: /etc/kube-fanout/tls
              readOnly: true
            {{- if $clientCA }}
            - name: client-ca
              mountPath: /etc/kube-fanout/client-ca
              readOnly: true
            {{- end }}
            {{- end }}
            {{- if $otlpCA }}
            - name: otlp-ca
              mountPath: /etc/kube-fanout/otlp-ca
              readOnly: true
            {{- end }}
            {{- if $otlpClient }}
            - name: otlp-client
              mountPath: /etc/kube-fanout/otlp-client
              readOnly: true
            {{- end }}
          {{- end }}
      {{- if $mounts }}
      volumes:
        {{- if $peer }}
        # What this pod shows the other kube-fanouts it reads from (its
        # peers, or a leaf's parents): a token minted for their audience,
        # and the CA their certificate chains to.
        - name: peer
          projected:
            sources:
              {{- if .Values.auth.enabled }}
              - serviceAccountToken:
                  audience: {{ include "kube-fanout.clientAudience" . | quote }}
                  expirationSeconds: 3600
                  path: token
              {{- end }}
              {{- if .Values.tls.enabled }}
              - {{- include "kube-fanout.caSource" . | trim | nindent 16 }}
              {{- end }}
        {{- end }}
        {{- with .Values.traces.tls.ca }}
        {{- if .existingSecret }}
        - name: otlp-ca
          secret:
            secretName: {{ .existingSecret }}
            items:
              - key: {{ .key }}
                path: ca.crt
        {{- else if .existingConfigMap }}
        - name: otlp-ca
          configMap:
            name: {{ .existingConfigMap }}
            items:
              - key: {{ .key }}
                path: ca.crt
        {{- end }}
        {{- end }}
        {{- with $otlpClient }}
        - name: otlp-client
          secret:
            secretName: {{ . }}
            items:
              - key: tls.crt
                path: tls.crt
              - key: tls.key
                path: tls.key
        {{- end }}
        {{- if .Values.tls.enabled }}
        # The serving certificate and key only.
        - name: tls
          secret:
            secretName: {{ include "kube-fanout.tlsSecretName" . }}
            items:
              - key: tls.crt
                path: tls.crt
              - key: tls.key
                path: tls.key
        {{- with .Values.tls.clientCA }}
        {{- if .existingSecret }}
        - name: client-ca
          secret:
            secretName: {{ .existingSecret }}
            items:
              - key: {{ .key }}
                path: ca.crt
        {{- else if .existingConfigMap }}
        - name: client-ca
          configMap:
            name: {{ .existingConfigMap }}
            items:
              - key: {{ .key }}
                path: ca.crt
        {{- end }}
        {{- end }}
        {{- end }}
      {{- end }}
      {{- with ternary .Values.nodeSelector .Values.nodeLocal.nodeSelector (eq $role "replica") }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if eq $role "replica" }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
      {{- with ternary .Values.tolerations .Values.nodeLocal.tolerations (eq $role "replica") }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
{{- end }}
