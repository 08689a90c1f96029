{{/*
kubefarm.checks stops the render on kubefarm values that have no meaning in
kubefarm any more, naming the value and what to use instead. It runs before
any object is rendered, so a values file is either taken whole or refused.
*/}}
{{- define "kubefarm.checks" -}}
{{- $v := .Values -}}
{{- $k := $v.kubernetes | default dict -}}

{{- if hasKey $k "enabled" -}}{{- if not $k.enabled -}}
{{- fail "kubernetes.enabled: false: the tenant control plane is what this chart makes; install charts/kubefarm-operator alone for the boot services" -}}
{{- end -}}{{- end -}}

{{- $api := $k.apiServer | default dict -}}
{{- $svc := $api.service | default dict -}}
{{- if eq (toString ($svc.type | default "LoadBalancer")) "ClusterIP" -}}
{{- fail "kubernetes.apiServer.service.type: ClusterIP: netbooted nodes outside the admin cluster could not reach the API server; use LoadBalancer, NodePort or ExternalIP" -}}
{{- end -}}
{{- range $component := list "apiServer" "controllerManager" "scheduler" -}}
{{- $args := (get $k $component | default dict).extraArgs | default dict -}}
{{- range $flag, $value := $args -}}
{{- $name := trimPrefix "--" $flag -}}
{{- if and (eq $name "feature-gates") (contains "IPv6DualStack" (toString $value)) -}}
{{- fail (printf "kubernetes.%s.extraArgs.feature-gates: IPv6DualStack was removed in Kubernetes 1.25 (dual stack is always on); remove it" $component) -}}
{{- end -}}
{{- if or (eq $name "service-cluster-ip-range") (eq $name "cluster-cidr") -}}
{{- fail (printf "kubernetes.%s.extraArgs.%s: the tenant's networks are kubernetes.network.serviceCIDR and podCIDR (one IPv4 range each: dual-stack tenants are not supported yet)" $component $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if ($k.persistence | default dict) | dig "enabled" true | not -}}
{{- fail "kubernetes.persistence.enabled: false: etcd always keeps its data on volumes in kubefarm; remove the setting (kubernetes.persistence.size and storageClassName choose them)" -}}
{{- end -}}
{{- if $k.kubelet -}}
{{- fail "kubernetes.kubelet: node settings live with the pools: kubelet (extraArgs, maxPods) at the top level or per pool; kubelet feature gates (IPv6DualStack among them) are gone with Kubernetes 1.25" -}}
{{- end -}}

{{- range $key, $_ := $v.ltsp | default dict -}}
{{- if ne $key "config" -}}
{{- fail (printf "ltsp.%s: kubefarm-pxe (charts/kubefarm-operator) serves DHCP, TFTP and HTTP boot for every cluster; there is no per-cluster LTSP server to configure: remove ltsp.%s" $key $key) -}}
{{- end -}}
{{- end -}}
{{- $c := ($v.ltsp | default dict).config | default dict -}}
{{- $image := "build it into the node image (images/node) and point bootImage at it" -}}
{{- if $c.extraFiles -}}
{{- fail "ltsp.config.extraFiles: nodes boot a verified, read-only image and run no copied scripts: bonds, VLANs, MTU and further addresses are hostNetwork (top level or per pool, with addresses per node; charts/kubefarm/README.md, \"Server networks\"); anything else: build it into the node image (images/node) and point bootImage at it" -}}
{{- end -}}
{{- range $key := list "sections" "extraProjectedItems" -}}
{{- if get $c $key -}}
{{- fail (printf "ltsp.config.%s: nodes boot a verified, read-only image and run no LTSP scripts or copied files: %s" $key $image) -}}
{{- end -}}
{{- end -}}
{{- if $c.sysctls -}}
{{- fail (printf "ltsp.config.sysctls: %s (images/node/rootfs/etc/sysctl.d; forwarding is already on)" $image) -}}
{{- end -}}
{{- if $c.dockerConfig -}}
{{- fail "ltsp.config.dockerConfig: nodes run containerd, not Docker; remove it (registry mirrors are registryMirrors)" -}}
{{- end -}}
{{- if hasKey $c "disableAutoupdate" -}}
{{- fail "ltsp.config.disableAutoupdate: node images carry no update timers (an update is a new BootImage and a rollout); remove it" -}}
{{- end -}}
{{- include "kubefarm.checkLTSPOptions" (dict "opts" ($c.options | default dict) "where" "ltsp.config.options") -}}
{{- range $tag, $opts := ($v.tags | default dict).ltspOptions | default dict -}}
{{- include "kubefarm.checkLTSPOptions" (dict "opts" ($opts | default dict) "where" (printf "tags.ltspOptions.%s" $tag)) -}}
{{- end -}}

{{- if $v.tokenGenerator -}}
{{- fail "tokenGenerator: join tokens are issued per machine and per boot by kubefarm-pxe; remove tokenGenerator" -}}
{{- end -}}

{{- range $i, $p := $v.nodePools | default list -}}
{{- range $j, $opt := $p.extraOpts | default list -}}
{{- if not (kindIs "map" $opt) -}}
{{- fail (printf "nodePools[%d].extraOpts[%d] %s: an extraOpts item is a map of a dnsmasq option to its value, such as {dhcp-generate-names: \"tag:?\"}" $i $j (toJson $opt)) -}}
{{- end -}}
{{- range $key, $value := $opt -}}
{{- if has $key (list "dhcp-generate-names" "dhcp-ignore-names") -}}
{{- if ne (toString $value) "tag:?" -}}
{{- fail (printf "nodePools[%d].extraOpts[%d].%s: %q: kubefarm understands this option only for the pool's own machines, as kubefarm's catchall example writes it: %s: \"tag:?\"" $i $j $key (toString $value) $key) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "nodePools[%d].extraOpts[%d] %s: raw dnsmasq options have no meaning in kubefarm: every machine that joins is listed under nodes (name, mac, ip), or joins through a catch-all range (range: <start>,<end>,<netmask>) with dhcp-generate-names: \"tag:?\" (network.dynamicRange.unknownMachines: Join), and DHCP options go in tags.dhcpOptions; remove it" $i $j (toJson $opt)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (len ($p.nodes | default list)) 250 -}}
{{- fail (printf "nodePools[%d].nodes: %d nodes; a pool holds at most 250, split it into several pools" $i (len $p.nodes)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
kubefarm.checkLTSPOptions refuses the ltsp.conf options of .opts (at
.where) that kubefarm cannot honour. KERNEL_PARAMETERS is mapped;
kubefarm.ignoredLTSPOptions are ignored and named in NOTES.txt.
*/}}
{{- define "kubefarm.checkLTSPOptions" -}}
{{- $ignored := include "kubefarm.ignoredLTSPOptions" . | splitList " " -}}
{{- range $key := keys .opts | sortAlpha -}}
{{- if and (ne $key "KERNEL_PARAMETERS") (not (has $key $ignored)) -}}
{{- if hasPrefix "FSTAB_" $key -}}
{{- fail (printf "%s.%s: the node image mounts what kubelet and containerd need on tmpfs already; other mounts belong in the image (images/node/rootfs/etc/fstab)" $.where $key) -}}
{{- else if eq $key "POST_INIT_NETWORKING" -}}
{{- fail (printf "%s.%s: nodes run no network scripts: bonds, VLANs, MTU and further addresses are hostNetwork (top level or per pool, with addresses per node; charts/kubefarm/README.md, \"Server networks\")" $.where $key) -}}
{{- else if hasPrefix "KUBELET_EXTRA_ARGS" $key -}}
{{- fail (printf "%s.%s: use kubelet.extraArgs (top level or per pool)" $.where $key) -}}
{{- else -}}
{{- fail (printf "%s.%s: nodes run no LTSP scripts: build it into the node image (images/node) and point bootImage at it; KERNEL_PARAMETERS is the only ltsp.conf option kubefarm maps (to kernelArgs)" $.where $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
LTSP options that are ignored: they tune LTSP's own boot menu and debug
shell, which a kubefarm boot does not have (iPXE boots the image directly).
*/}}
{{- define "kubefarm.ignoredLTSPOptions" -}}MENU_TIMEOUT DEBUG_SHELL{{- end -}}
