{{/*
Names, labels and shared pieces of the fp8 chart.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "fp8.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<name>" (just the release when it already contains the name), or fullnameOverride. */}}
{{- define "fp8.fullname" -}}
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

{{/* "fp8-0.1.0" for the helm.sh/chart label. */}}
{{- define "fp8.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every resource. */}}
{{- define "fp8.labels" -}}
helm.sh/chart: {{ include "fp8.chart" . }}
{{ include "fp8.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fp8
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels that select the release's pods (add app.kubernetes.io/component for one kind). */}}
{{- define "fp8.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fp8.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The coordinator's Deployment, Service, ConfigMap and claim. */}}
{{- define "fp8.coordinator.fullname" -}}
{{- printf "%s-coordinator" (include "fp8.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The workers' StatefulSet and headless Service (52 characters at most: the
     StatefulSet's controller-revision-hash label adds to it). */}}
{{- define "fp8.workers.fullname" -}}
{{- printf "%s-worker" (include "fp8.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "fp8.coordinator.labels" -}}
{{ include "fp8.labels" . }}
app.kubernetes.io/component: coordinator
{{- end -}}

{{- define "fp8.coordinator.selectorLabels" -}}
{{ include "fp8.selectorLabels" . }}
app.kubernetes.io/component: coordinator
{{- end -}}

{{- define "fp8.workers.labels" -}}
{{ include "fp8.labels" . }}
app.kubernetes.io/component: worker
{{- end -}}

{{- define "fp8.workers.selectorLabels" -}}
{{ include "fp8.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end -}}

{{/* "repository:tag". An empty tag is what scripts/build_image.sh tags: appVersion for
     CPU workers, appVersion-cuda (with cuBLASLt and NCCL) for GPU workers. */}}
{{- define "fp8.image" -}}
{{- $tag := toString (default "" .Values.image.tag) -}}
{{- if not $tag -}}
{{- $tag = ternary .Chart.AppVersion (printf "%s-cuda" .Chart.AppVersion) (eq (toString .Values.workers.device) "cpu") -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* ".svc" or ".svc.<clusterDomain>": the end of an in-cluster DNS name. */}}
{{- define "fp8.svcSuffix" -}}
{{- if .Values.clusterDomain -}}
{{- printf "svc.%s" .Values.clusterDomain -}}
{{- else -}}
svc
{{- end -}}
{{- end -}}

{{/* host:port of the coordinator's gRPC port inside the cluster (what workers dial). */}}
{{- define "fp8.coordinator.address" -}}
{{- printf "%s.%s.%s:%d" (include "fp8.coordinator.fullname" .) .Release.Namespace (include "fp8.svcSuffix" .) (int .Values.coordinator.grpcPort) -}}
{{- end -}}

{{/* What trainers dial (--advertise). */}}
{{- define "fp8.coordinator.advertise" -}}
{{- default (include "fp8.coordinator.address" .) .Values.coordinator.advertiseAddress -}}
{{- end -}}

{{/* The Secret holding admin-token and worker-token. */}}
{{- define "fp8.tokens.secretName" -}}
{{- if .Values.tokens.existingSecret -}}
{{- .Values.tokens.existingSecret -}}
{{- else -}}
{{- printf "%s-tokens" (include "fp8.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The coordinator's state claim. */}}
{{- define "fp8.coordinator.claimName" -}}
{{- default (printf "%s-state" (include "fp8.coordinator.fullname" .) | trunc 63 | trimSuffix "-") .Values.coordinator.persistence.existingClaim -}}
{{- end -}}

{{/* Mount point of the tokens in the pods. */}}
{{- define "fp8.tokens.mountPath" -}}/etc/fp8/tokens{{- end -}}
{{/* Mount point of the TLS Secret in the pods. */}}
{{- define "fp8.tls.mountPath" -}}/etc/fp8/tls{{- end -}}

{{/*
The forms of workers.device fp8-worker accepts (values.schema.json has the same pattern):
cpu, one GPU cuda:N, a list cuda:N,M,... (one worker slot per GPU) or cuda:all (every GPU
the pod sees: its workers.gpusPerPod).
*/}}
{{- define "fp8.workers.devicePattern" -}}^(cpu|cuda:all|cuda:[0-9]+(,[0-9]+)*)${{- end -}}

{{/* How many workers (slots) each worker pod registers: one per GPU, or one for cpu. */}}
{{- define "fp8.workers.slotsPerPod" -}}
{{- $device := toString .Values.workers.device -}}
{{- if eq $device "cuda:all" -}}
{{- int .Values.workers.gpusPerPod -}}
{{- else if hasPrefix "cuda:" $device -}}
{{- len (splitList "," (trimPrefix "cuda:" $device)) -}}
{{- else -}}
1
{{- end -}}
{{- end -}}

{{/* Workers the chart deploys: replicas x the slots each pod offers. */}}
{{- define "fp8.workers.total" -}}
{{- mul (int .Values.workers.replicas) (int (include "fp8.workers.slotsPerPod" .)) -}}
{{- end -}}

{{/* The helm test's Pod and ConfigMap. */}}
{{- define "fp8.helmTest.fullname" -}}
{{- printf "%s-test" (include "fp8.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Where the worker pods mount the helm test's corpus: a data root of its own. */}}
{{- define "fp8.helmTest.dataDir" -}}/etc/fp8/helm-test{{- end -}}

{{/* Ranks of the helm test's job: helmTest.worldSize, or 2 when there are 2 workers, else 1. */}}
{{- define "fp8.helmTest.worldSize" -}}
{{- if gt (int .Values.helmTest.worldSize) 0 -}}
{{- int .Values.helmTest.worldSize -}}
{{- else -}}
{{- min 2 (int (include "fp8.workers.total" .)) -}}
{{- end -}}
{{- end -}}

{{/* The coordinator's data roots, ":"-separated (FP8_DATA_ROOTS): coordinator.dataRoots,
     and the helm test's corpus folder when helmTest is enabled. */}}
{{- define "fp8.coordinator.dataRoots" -}}
{{- $roots := .Values.coordinator.dataRoots -}}
{{- if .Values.helmTest.enabled -}}
{{- $roots = append $roots (include "fp8.helmTest.dataDir" .) -}}
{{- end -}}
{{- join ":" $roots -}}
{{- end -}}

{{/* PromQL (prometheusrule.yaml): a counter's rise over a window, counting a series born inside it from 0: the
       coordinator makes fp8_workers_lost_total{device_kind} and
       fp8_job_numerics_events_total{job_id,kind} at their first event, with the value
       1, which increase() alone never sees. */}}
{{- define "fp8.promql.rise" -}}
(({{ .x }} unless {{ .x }} offset {{ .w }}) + 0) or increase({{ .x }}[{{ .w }}])
{{- end -}}

{{/*
Checks of value combinations the schema cannot express. Included by every template that
depends on them, so that `helm template` fails with a message naming the values.
*/}}
{{- define "fp8.validate" -}}
{{- $w := .Values.workers -}}
{{- $c := .Values.coordinator -}}
{{- if lt (int $w.replicas) 1 -}}
{{- fail (printf "workers.replicas must be at least 1 (got %v): a job needs world_size free workers" $w.replicas) -}}
{{- end -}}
{{- $device := toString $w.device -}}
{{- if not (regexMatch (include "fp8.workers.devicePattern" .) $device) -}}
{{- fail (printf "workers.device must be \"cpu\", \"cuda:N\", a list \"cuda:N,M,...\" or \"cuda:all\" (got %q)" $device) -}}
{{- end -}}
{{- if and (hasPrefix "cuda:" $device) (lt (int $w.gpusPerPod) 1) -}}
{{- fail (printf "workers.device is %s but workers.gpusPerPod is %v: a cuda worker needs a GPU (use values-cpu.yaml for CPU workers)" $device $w.gpusPerPod) -}}
{{- end -}}
{{- if and (hasPrefix "cuda:" $device) (ne $device "cuda:all") -}}
{{- $seen := dict -}}
{{- range $item := splitList "," (trimPrefix "cuda:" $device) -}}
{{- /* Decimal, as fp8-worker reads it ("01" is GPU 1); too many digits is too big a GPU. */ -}}
{{- $digits := regexReplaceAll "^0+([0-9])" $item "${1}" -}}
{{- $index := atoi $digits -}}
{{- if or (ne (toString $index) $digits) (ge $index (int $w.gpusPerPod)) -}}
{{- $which := ternary (printf " (cuda:%s)" $item) "" (contains "," $device) -}}
{{- fail (printf "workers.device %s names a GPU the pod does not have%s: each pod sees workers.gpusPerPod=%v GPU(s), numbered from cuda:0" $device $which $w.gpusPerPod) -}}
{{- end -}}
{{- if hasKey $seen $digits -}}
{{- fail (printf "workers.device %s lists cuda:%s twice: each GPU is one worker slot, listed once" $device $digits) -}}
{{- end -}}
{{- $_ := set $seen $digits true -}}
{{- end -}}
{{- end -}}
{{- if le (int $c.lostAfterMs) (int $c.heartbeatIntervalMs) -}}
{{- fail (printf "coordinator.lostAfterMs (%v) must be longer than coordinator.heartbeatIntervalMs (%v)" $c.lostAfterMs $c.heartbeatIntervalMs) -}}
{{- end -}}
{{- if le (int $w.terminationGracePeriodSeconds) (int $w.stopGraceSeconds) -}}
{{- fail (printf "workers.terminationGracePeriodSeconds (%v) must exceed workers.stopGraceSeconds (%v): the worker needs that long to stop its ranks" $w.terminationGracePeriodSeconds $w.stopGraceSeconds) -}}
{{- end -}}
{{- if eq (int $c.grpcPort) (int $c.metricsPort) -}}
{{- fail (printf "coordinator.grpcPort and coordinator.metricsPort are both %v" $c.grpcPort) -}}
{{- end -}}
{{- if and .Values.tokens.existingSecret (or .Values.tokens.adminToken .Values.tokens.workerToken) -}}
{{- fail "tokens.existingSecret is set: leave tokens.adminToken and tokens.workerToken empty (the tokens come from that Secret)" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled is true: set tls.secretName to a Secret with the certificate, its key and the CA (e.g. from cert-manager)" -}}
{{- end -}}
{{- $pdb := $w.podDisruptionBudget -}}
{{- if $pdb.enabled -}}
{{- $max := $pdb.maxUnavailable -}}
{{- $min := $pdb.minAvailable -}}
{{- $hasMax := and (not (kindIs "invalid" $max)) (ne (toString $max) "") -}}
{{- $hasMin := and (not (kindIs "invalid" $min)) (ne (toString $min) "") -}}
{{- if and $hasMax $hasMin -}}
{{- fail (printf "workers.podDisruptionBudget: set maxUnavailable (%v) or minAvailable (%v), not both (set the other to null)" $max $min) -}}
{{- end -}}
{{- if not (or $hasMax $hasMin) -}}
{{- fail "workers.podDisruptionBudget.enabled is true: set maxUnavailable or minAvailable (or enabled: false)" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.prometheusRule.enabled (not .Values.serviceMonitor.enabled) (not .Values.prometheusRule.coordinatorSelector) -}}
{{- fail "prometheusRule.enabled: its alerts select the coordinator's series by the labels the ServiceMonitor gives them: set serviceMonitor.enabled=true, or prometheusRule.coordinatorSelector to the labels your Prometheus gives them (e.g. 'job=\"fp8-coordinator\"')" -}}
{{- end -}}
{{- $np := .Values.networkPolicy -}}
{{- if and $np.enabled (not $np.metrics.namespace) (not $np.metrics.namespaceSelector) (not $np.metrics.podSelector) -}}
{{- fail "networkPolicy.metrics: give the monitoring namespace (namespace), a namespaceSelector or a podSelector: with none, nothing could scrape /metrics" -}}
{{- end -}}
{{- if .Values.helmTest.enabled -}}
{{- $total := int (include "fp8.workers.total" .) -}}
{{- if gt (int .Values.helmTest.worldSize) $total -}}
{{- fail (printf "helmTest.worldSize is %v but the chart deploys %d worker(s) (workers.replicas x slots per pod): the test job could never start" .Values.helmTest.worldSize $total) -}}
{{- end -}}
{{- if not .Values.coordinator.checkpointRoots -}}
{{- fail "helmTest.enabled needs a coordinator.checkpointRoots entry for the test job's checkpoints" -}}
{{- end -}}
{{- end -}}
{{- range $key := list "dataRoots" "checkpointRoots" -}}
{{- range $root := index $c $key -}}
{{- if not (regexMatch "^/[^:]*$" $root) -}}
{{- fail (printf "coordinator.%s: %q must be an absolute path without ':'" $key $root) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
