{{/*
Application name. The chart is kubefarm-operator; the application it runs is
kubefarm, so a release named "kubefarm" gives kubefarm-manager,
kubefarm-webhook, kubefarm-metrics.
*/}}
{{- define "kubefarm.name" -}}
{{- default "kubefarm" .Values.nameOverride | trunc 45 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name prefix of every resource. Truncated to 45 characters so that the
longest suffix the chart appends ("-leader-election") keeps names within 63.
*/}}
{{- define "kubefarm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "kubefarm.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kubefarm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every resource. Nothing here changes between two renders. */}}
{{- define "kubefarm.labels" -}}
helm.sh/chart: {{ include "kubefarm.chart" . }}
app.kubernetes.io/name: {{ include "kubefarm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubefarm
{{- end -}}

{{/* Selector labels of the manager pods. */}}
{{- define "kubefarm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubefarm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "kubefarm.managerName" -}}
{{- printf "%s-manager" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{- define "kubefarm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubefarm.managerName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubefarm.webhookServiceName" -}}
{{- printf "%s-webhook" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{- define "kubefarm.metricsServiceName" -}}
{{- printf "%s-metrics" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{/* The webhook serving Certificate and the Secret cert-manager writes it to. */}}
{{- define "kubefarm.webhookCertName" -}}
{{- printf "%s-webhook" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{- define "kubefarm.webhookCertSecret" -}}
{{- printf "%s-webhook-tls" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{- define "kubefarm.selfSignedIssuer" -}}
{{- printf "%s-selfsigned" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{- define "kubefarm.caName" -}}
{{- printf "%s-ca" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{- define "kubefarm.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
Split a generated multi-document YAML file into its non-empty documents,
parse each and return them as {"docs": [...]} (templates can only return
strings). Fails on a document that does not parse.
Usage: (include "kubefarm.parseDocs" (dict "path" "files/x.yaml" "root" $) | fromYaml).docs
*/}}
{{- define "kubefarm.parseDocs" -}}
{{- $content := .root.Files.Get .path -}}
{{- if not $content -}}
{{- fail (printf "%s is missing or empty; run 'make generate'" .path) -}}
{{- end -}}
{{- $docs := list -}}
{{- range $raw := regexSplit "(?m)^---[ \\t]*$" $content -1 -}}
{{- if trim $raw -}}
{{- $doc := fromYaml $raw -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "%s: %s" $.path $doc.Error) -}}
{{- end -}}
{{- if $doc -}}
{{- $docs = append $docs $doc -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "docs" $docs | toYaml -}}
{{- end -}}

{{/*
Fail if an RBAC rule grants a wildcard. Argument: dict "rules" list "where" string.
*/}}
{{- define "kubefarm.noWildcards" -}}
{{- range $rule := .rules -}}
{{- range $field := list "apiGroups" "resources" "verbs" "resourceNames" "nonResourceURLs" -}}
{{- range $v := (get $rule $field | default list) -}}
{{- if contains "*" (toString $v) -}}
{{- fail (printf "%s: RBAC rule %s contains the wildcard %q; grant exact names" $.where $field $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* ---- kubefarm-pxe ---- */}}

{{- define "kubefarm.pxeName" -}}
{{- printf "%s-pxe" (include "kubefarm.fullname" .) -}}
{{- end -}}

{{/* Selector labels of the kubefarm-pxe pods. */}}
{{- define "kubefarm.pxeSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kubefarm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: pxe
{{- end -}}

{{- define "kubefarm.pxeServiceAccountName" -}}
{{- if .Values.pxe.serviceAccount.create -}}
{{- default (include "kubefarm.pxeName" .) .Values.pxe.serviceAccount.name -}}
{{- else -}}
{{- required "pxe.serviceAccount.name is required when pxe.serviceAccount.create is false" .Values.pxe.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubefarm.pxeImage" -}}
{{- $img := .Values.pxe.image -}}
{{- $tag := default .Chart.AppVersion $img.tag -}}
{{- if $img.digest -}}
{{- printf "%s:%s@%s" $img.repository $tag $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The port of pxe.httpAddr (":8080", "10.0.0.1:8080"): the probes' and the
container port's. The schema requires an explicit port.
*/}}
{{- define "kubefarm.pxeHTTPPort" -}}
{{- regexReplaceAll "^.*:([0-9]+)$" .Values.pxe.httpAddr "${1}" -}}
{{- end -}}
